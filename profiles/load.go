package profiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gateway/harness"
	"gateway/harness/mcptools"
	"gateway/internal/config"
	"gateway/internal/secret"
)

// File names inside a profile directory.
const (
	ProfileFile = "profile.yaml"
	SystemFile  = "SYSTEM.md"
	HooksSubdir = "hooks"
)

// maxFileBytes bounds profile.yaml and SYSTEM.md: both are read whole into memory.
const maxFileBytes = 1 << 20

// DefaultName is the default profile's name when profiles.default is empty.
const DefaultName = "assistant"

// Queue modes: what a message that arrives during a turn does.
const (
	QueueFollowup  = "followup"  // run after the current turn (default)
	QueueSteer     = "steer"     // inject at the turn's next save point
	QueueCollect   = "collect"   // merge into one later turn
	QueueInterrupt = "interrupt" // abort the turn, run the newest message
)

// TTS modes a profile may set.
const (
	TTSOff     = "off"
	TTSInbound = "inbound"
	TTSAlways  = "always"
)

// ValidateName reports whether name can be a profile name: 1-64 characters of a-z, 0-9, '_' and '-',
// starting with a letter or digit.
// The alphabet has no dots or slashes, so a name can never escape profiles.dir.
func ValidateName(name string) error {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid profile name %q: use 1-64 characters a-z, 0-9, '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ValidQueueMode reports whether m is a queue mode ("" is not).
func ValidQueueMode(m string) bool {
	switch m {
	case QueueFollowup, QueueSteer, QueueCollect, QueueInterrupt:
		return true
	}
	return false
}

// fileProfile is the on-disk form of profile.yaml, decoded by the shared decoder
// (gateway/internal/config): strict, ${VAR} expanded, durations as in gateway.yaml.
type fileProfile struct {
	Description string        `yaml:"description"`
	LLM         fileLLM       `yaml:"llm"`
	QueueMode   string        `yaml:"queue_mode"`
	Vision      *bool         `yaml:"vision"`
	Tools       []string      `yaml:"tools"`
	STT         fileSTT       `yaml:"stt"`
	TTS         fileTTS       `yaml:"tts"`
	IdleReset   time.Duration `yaml:"idle_reset"`
	// MCP lists the profile's own MCP servers (beside the top-level mcp:).
	MCP []mcptools.ServerConfig `yaml:"mcp"`
}

type fileLLM struct {
	Provider string `yaml:"provider"`
	Model    string `yaml:"model"`
	BaseURL  string `yaml:"base_url"`
	// APIKey stays a plain string only until it is wrapped in a secret.Secret below.
	APIKey        string `yaml:"api_key"`
	ContextWindow int    `yaml:"context_window"`
}

type fileSTT struct {
	Language string `yaml:"language"`
}

type fileTTS struct {
	Mode     string `yaml:"mode"`
	Voice    string `yaml:"voice"`
	Language string `yaml:"language"`
}

// Options are what Load checks each profile against, so that a profile that could only fail
// at message time fails at load time (and in `gateway check`) instead.
type Options struct {
	// Getenv expands ${VAR} in profile.yaml; nil means os.Getenv.
	Getenv func(string) string
	// Tools resolves tool names the way sessions will (the gateway passes
	// harness.BuiltinTools): a name it rejects is a load error. Nil: names are not checked.
	Tools func(names []string) ([]harness.Tool, error)
	// LLM is the global llm section. When set, a profile's llm section is checked merged
	// onto it: a provider switched to anthropic needs a model.
	LLM *harness.Config
}

// Load reads every profile directory under cfg.Dir and checks the bindings against them.
//
// Layout: cfg.Dir/NAME/ holds an optional profile.yaml (decoded strictly: an unknown key is an
// error), an optional SYSTEM.md (the system prompt; DefaultSystemPrompt when absent or blank) and an
// optional hooks/ directory (Profile.HooksDir). Regular files in cfg.Dir and directories whose name
// starts with '.' are ignored; any other directory must have a valid name (ValidateName).
// profile.yaml is decoded by the shared decoder (gateway/internal/config): `${VAR}` expands
// from the environment and an unset VAR is an error naming the file, line and key.
//
// A missing cfg.Dir (or cfg.Dir == "") is not an error: the set then holds only the built-in default.
// cfg.Default ("" means DefaultName) names the default profile; when it has no directory it is the
// built-in profile of that name. Every binding must name a known profile.
//
// Load reports every problem it finds, joined with errors.Join, and returns a nil Set if there was any.
func Load(cfg Config, bindings []Binding) (*Set, error) {
	return LoadWith(cfg, bindings, Options{})
}

// LoadWith is Load with the checks of opts.
func LoadWith(cfg Config, bindings []Binding, opts Options) (*Set, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	def := cfg.WithDefaults().Default
	var errs []error
	if err := ValidateName(def); err != nil {
		errs = append(errs, fmt.Errorf("profiles.default: %w", err))
	}

	byName := map[string]*Profile{}
	broken := map[string]bool{} // already reported; a binding to one is not "unknown" too
	if cfg.Dir != "" {
		// Absolute once, here: a profile's hooks run in their own folders, where a path
		// relative to the working directory would point elsewhere.
		if abs, err := filepath.Abs(cfg.Dir); err == nil {
			cfg.Dir = abs
		}
		entries, err := os.ReadDir(cfg.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// No profiles directory: only the built-in default.
		case err != nil:
			errs = append(errs, fmt.Errorf("profiles.dir: %w", err))
		default:
			for _, e := range entries {
				name := e.Name()
				dir := filepath.Join(cfg.Dir, name)
				if strings.HasPrefix(name, ".") || !isDir(dir) {
					continue
				}
				if err := ValidateName(name); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", dir, err))
					continue
				}
				p, perrs := loadProfile(name, dir, opts)
				errs = append(errs, perrs...)
				if p != nil {
					byName[name] = p
				} else {
					broken[name] = true
				}
			}
		}
	}
	if _, ok := byName[def]; !ok && !broken[def] {
		byName[def] = builtinProfile(def)
	}

	for i, b := range bindings {
		switch _, ok := byName[b.Profile]; {
		case b.Profile == "":
			errs = append(errs, fmt.Errorf("bindings[%d].profile: missing; name one of: %s", i, strings.Join(sortedNames(byName), ", ")))
		case !ok && !broken[b.Profile]:
			errs = append(errs, fmt.Errorf("bindings[%d].profile: unknown profile %q; known profiles: %s", i, b.Profile, strings.Join(sortedNames(byName), ", ")))
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Set{byName: byName, bindings: slices.Clone(bindings), def: def}, nil
}

// isDir follows symlinks, so an admin may link a profile directory in from elsewhere.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func builtinProfile(name string) *Profile {
	return &Profile{Name: name, System: DefaultSystemPrompt}
}

// loadProfile reads one profile directory. It returns the profile (nil when unusable) and its problems.
func loadProfile(name, dir string, opts Options) (*Profile, []error) {
	p := builtinProfile(name)
	p.Dir = dir
	var errs []error

	sysPath := filepath.Join(dir, SystemFile)
	switch data, err := readBounded(sysPath); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		errs = append(errs, err)
	case strings.TrimSpace(string(data)) != "":
		p.System = strings.TrimSpace(string(data))
	}

	if isDir(filepath.Join(dir, HooksSubdir)) {
		p.HooksDir = filepath.Join(dir, HooksSubdir)
	}

	yamlPath := filepath.Join(dir, ProfileFile)
	data, err := readBounded(yamlPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, errs
	case err != nil:
		return nil, append(errs, err)
	}
	errs = append(errs, applyFile(p, yamlPath, data, opts)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	return data, nil
}

// applyFile decodes profile.yaml strictly and validates it into p.
func applyFile(p *Profile, path string, data []byte, opts Options) []error {
	var f fileProfile
	root, derrs := config.DecodeBytes(data, &f, config.Options{File: path, Getenv: opts.Getenv})
	var errs []error
	for _, e := range derrs {
		errs = append(errs, e)
	}
	if root == nil {
		return errs // empty file (all defaults), or not YAML at all
	}
	bad := func(key, format string, args ...any) {
		errs = append(errs, config.At(path, root, key, format, args...))
	}

	p.Description = strings.TrimSpace(f.Description)
	p.LLM = harness.Config{
		Provider: f.LLM.Provider,
		Model:    f.LLM.Model,
		BaseURL:  f.LLM.BaseURL,
		APIKey:   secret.Secret(f.LLM.APIKey),
	}
	switch {
	case f.LLM.ContextWindow < 0:
		bad("llm.context_window", "%d is negative; write the model's context window in tokens, or leave it out for the known default", f.LLM.ContextWindow)
	case f.LLM.ContextWindow > 0 && f.LLM.ContextWindow < 1024:
		bad("llm.context_window", "%d tokens is too small to hold a conversation (at least 1024)", f.LLM.ContextWindow)
	default:
		p.LLM.ContextWindow = f.LLM.ContextWindow
	}
	if f.LLM.Provider != "" {
		if _, err := harness.NewProvider(harness.Config{Provider: f.LLM.Provider}, nil); err != nil {
			bad("llm.provider", "%s", strings.TrimPrefix(err.Error(), "llm.provider: "))
		}
	}
	if opts.LLM != nil {
		provider, model := opts.LLM.Provider, opts.LLM.Model
		if f.LLM.Provider != "" && f.LLM.Provider != provider {
			provider, model = f.LLM.Provider, "" // a different provider inherits no model
		}
		if f.LLM.Model != "" {
			model = f.LLM.Model
		}
		if provider == "anthropic" && model == "" {
			bad("llm.model", "required with provider anthropic (e.g. claude-sonnet-4-5)")
		}
	}
	if f.LLM.BaseURL != "" {
		// The URL is not echoed: it may carry credentials.
		if u, err := url.Parse(f.LLM.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("llm.base_url", "must be an http:// or https:// URL")
		}
	}

	p.TextOnly = f.Vision != nil && !*f.Vision

	switch {
	case f.QueueMode == "":
	case ValidQueueMode(f.QueueMode):
		p.QueueMode = f.QueueMode
	default:
		bad("queue_mode", "%q is not a queue mode; use followup, steer, collect or interrupt", f.QueueMode)
	}

	if f.Tools != nil {
		p.Tools = make([]string, 0, len(f.Tools))
		for i, t := range f.Tools {
			t = strings.TrimSpace(t)
			key := fmt.Sprintf("tools[%d]", i)
			switch {
			case t == "":
				bad(key, "empty tool name")
			case slices.Contains(p.Tools, t):
				bad(key, "tool %q listed twice", t)
			default:
				if opts.Tools != nil {
					if _, err := opts.Tools([]string{t}); err != nil {
						bad(key, "%v", err)
						continue
					}
				}
				p.Tools = append(p.Tools, t)
			}
		}
	}

	for i, m := range f.MCP {
		if err := m.Validate(); err != nil {
			bad(fmt.Sprintf("mcp[%d]", i), "%s", err.Error())
			continue
		}
		if slices.ContainsFunc(p.MCP, func(x mcptools.ServerConfig) bool { return x.Name == m.Name }) {
			bad(fmt.Sprintf("mcp[%d]", i), "server %q listed twice", m.Name)
			continue
		}
		p.MCP = append(p.MCP, m)
	}

	switch f.TTS.Mode {
	case "", TTSOff, TTSInbound, TTSAlways:
		p.TTSMode = f.TTS.Mode
	default:
		bad("tts.mode", "%q is not a TTS mode; use off, inbound or always", f.TTS.Mode)
	}
	p.TTSVoice = f.TTS.Voice
	p.Language = f.STT.Language
	p.TTSLanguage = f.TTS.Language
	if p.TTSLanguage == "" {
		p.TTSLanguage = p.Language
	}

	if f.IdleReset < 0 {
		bad("idle_reset", "%s is negative; write e.g. 30m, 2h or 0 (never)", f.IdleReset)
	} else {
		p.IdleReset = f.IdleReset
	}
	return errs
}

func sortedNames(m map[string]*Profile) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
