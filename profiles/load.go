package profiles

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"gateway/harness"
	"gateway/internal/secret"
	"gateway/mcptools"
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

// fileProfile is the on-disk form of profile.yaml.
type fileProfile struct {
	Description string   `yaml:"description"`
	LLM         fileLLM  `yaml:"llm"`
	QueueMode   string   `yaml:"queue_mode"`
	Tools       []string `yaml:"tools"`
	STT         fileSTT  `yaml:"stt"`
	TTS         fileTTS  `yaml:"tts"`
	IdleReset   string   `yaml:"idle_reset"`
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

// Load reads every profile directory under cfg.Dir and checks the bindings against them.
//
// Layout: cfg.Dir/NAME/ holds an optional profile.yaml (decoded strictly: an unknown key is an
// error), an optional SYSTEM.md (the system prompt; DefaultSystemPrompt when absent or blank) and an
// optional hooks/ directory (Profile.HooksDir). Regular files in cfg.Dir and directories whose name
// starts with '.' are ignored; any other directory must have a valid name (ValidateName).
// `${VAR}` and `$VAR` in profile.yaml string values expand from the environment (unset: empty;
// `$$` is a literal '$').
//
// A missing cfg.Dir (or cfg.Dir == "") is not an error: the set then holds only the built-in default.
// cfg.Default ("" means DefaultName) names the default profile; when it has no directory it is the
// built-in profile of that name. Every binding must name a known profile.
//
// Load reports every problem it finds, joined with errors.Join, and returns a nil Set if there was any.
func Load(cfg Config, bindings []Binding) (*Set, error) {
	def := cfg.Default
	if def == "" {
		def = DefaultName
	}
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
				p, perrs := loadProfile(name, dir)
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
func loadProfile(name, dir string) (*Profile, []error) {
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
	errs = append(errs, applyFile(p, yamlPath, data)...)
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
func applyFile(p *Profile, path string, data []byte) []error {
	var root yaml.Node // for line numbers of validation errors
	if err := yaml.Unmarshal(data, &root); err != nil {
		return []error{fmt.Errorf("%s: %s", path, cleanYAMLError(err.Error()))}
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if root.Kind == 0 || (doc.Kind == yaml.ScalarNode && doc.Tag == "!!null") {
		return nil // empty file: all defaults
	}
	if doc.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s: expected a mapping of keys (line %d)", path, doc.Line)}
	}

	var f fileProfile
	var errs []error
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return []error{fmt.Errorf("%s: %s", path, cleanYAMLError(err.Error()))}
		}
		// A TypeError still decodes every other key, so validation below reports their problems too.
		for _, msg := range te.Errors {
			errs = append(errs, fmt.Errorf("%s: %s", path, describeTypeError(msg, doc)))
		}
	}
	expandAll(&f)

	bad := func(msg string, keys ...string) {
		errs = append(errs, fmt.Errorf("%s: %s: %s (line %d)", path, strings.Join(keys, "."), msg, lineOf(doc, keys...)))
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
		bad(fmt.Sprintf("%d is negative; write the model's context window in tokens, or leave it out for the known default", f.LLM.ContextWindow), "llm", "context_window")
	case f.LLM.ContextWindow > 0 && f.LLM.ContextWindow < 1024:
		bad(fmt.Sprintf("%d tokens is too small to hold a conversation (at least 1024)", f.LLM.ContextWindow), "llm", "context_window")
	default:
		p.LLM.ContextWindow = f.LLM.ContextWindow
	}
	if f.LLM.BaseURL != "" {
		// The URL is not echoed: it may carry credentials.
		if u, err := url.Parse(f.LLM.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("must be an http:// or https:// URL", "llm", "base_url")
		}
	}

	switch {
	case f.QueueMode == "":
	case ValidQueueMode(f.QueueMode):
		p.QueueMode = f.QueueMode
	default:
		bad(fmt.Sprintf("%q is not a queue mode; use followup, steer, collect or interrupt", f.QueueMode), "queue_mode")
	}

	if f.Tools != nil {
		p.Tools = make([]string, 0, len(f.Tools))
		for i, t := range f.Tools {
			t = strings.TrimSpace(t)
			switch {
			case t == "":
				bad("empty tool name", "tools", strconv.Itoa(i))
			case slices.Contains(p.Tools, t):
				bad(fmt.Sprintf("tool %q listed twice", t), "tools", strconv.Itoa(i))
			default:
				p.Tools = append(p.Tools, t)
			}
		}
	}

	for i, m := range f.MCP {
		if err := m.Validate(); err != nil {
			bad(err.Error(), "mcp", strconv.Itoa(i))
			continue
		}
		if slices.ContainsFunc(p.MCP, func(x mcptools.ServerConfig) bool { return x.Name == m.Name }) {
			bad(fmt.Sprintf("server %q listed twice", m.Name), "mcp", strconv.Itoa(i))
			continue
		}
		p.MCP = append(p.MCP, m)
	}

	switch f.TTS.Mode {
	case "", TTSOff, TTSInbound, TTSAlways:
		p.TTSMode = f.TTS.Mode
	default:
		bad(fmt.Sprintf("%q is not a TTS mode; use off, inbound or always", f.TTS.Mode), "tts", "mode")
	}
	p.TTSVoice = f.TTS.Voice
	p.Language = f.STT.Language
	p.TTSLanguage = f.TTS.Language
	if p.TTSLanguage == "" {
		p.TTSLanguage = p.Language
	}

	if f.IdleReset != "" {
		d, err := time.ParseDuration(f.IdleReset)
		switch {
		case err != nil:
			bad(fmt.Sprintf("%q is not a duration; write e.g. 30m, 2h or 0 (never)", f.IdleReset), "idle_reset")
		case d < 0:
			bad(fmt.Sprintf("%q is negative", f.IdleReset), "idle_reset")
		default:
			p.IdleReset = d
		}
	}
	return errs
}

// expandAll expands environment variables in every string value of f.
func expandAll(f *fileProfile) {
	for _, s := range []*string{
		&f.Description, &f.LLM.Provider, &f.LLM.Model, &f.LLM.BaseURL, &f.LLM.APIKey,
		&f.QueueMode, &f.STT.Language, &f.TTS.Mode, &f.TTS.Voice, &f.TTS.Language, &f.IdleReset,
	} {
		*s = expand(*s)
	}
	for i := range f.Tools {
		f.Tools[i] = expand(f.Tools[i])
	}
	for i := range f.MCP {
		m := &f.MCP[i]
		m.URL = expand(m.URL)
		for j := range m.Command {
			m.Command[j] = expand(m.Command[j])
		}
		for k, v := range m.Env {
			m.Env[k] = secret.Secret(expand(v.Reveal()))
		}
		for k, v := range m.Headers {
			m.Headers[k] = secret.Secret(expand(v.Reveal()))
		}
	}
}

func expand(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return os.Expand(s, func(name string) string {
		if name == "$" {
			return "$" // "$$" escapes a literal dollar sign
		}
		return os.Getenv(name)
	})
}

// lineOf finds the line of the value at a key path (list indexes as decimal strings); 0 if absent.
func lineOf(n *yaml.Node, keys ...string) int {
	line := n.Line
	for _, k := range keys {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(k); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}

// describeTypeError turns one yaml.v3 type error into a message that names the key.
func describeTypeError(msg string, doc *yaml.Node) string {
	// Compiled here, not at package level: this runs only on bad input.
	unknownFieldRE := regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	cannotDecodeRE := regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (?:`[^`]*` )?into (.+)$")
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		key := m[2]
		if prefix := sectionOf(m[3]); prefix != "" {
			key = prefix + "." + key
		}
		return fmt.Sprintf("unknown key %q (line %s)", key, m[1])
	}
	if m := cannotDecodeRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		what := fmt.Sprintf("expected %s, got %s", describeGoType(m[3]), describeTag(m[2]))
		if path := pathAtLine(doc, line, "!!"+m[2], nil); path != "" {
			return fmt.Sprintf("%s: %s (line %d)", path, what, line)
		}
		return fmt.Sprintf("%s (line %d)", what, line)
	}
	return cleanYAMLError(msg)
}

// sectionOf maps a decoding type to its key in profile.yaml.
func sectionOf(goType string) string {
	for _, s := range []struct {
		t   reflect.Type
		key string
	}{
		{reflect.TypeFor[fileLLM](), "llm"},
		{reflect.TypeFor[fileSTT](), "stt"},
		{reflect.TypeFor[fileTTS](), "tts"},
	} {
		if s.t.String() == goType {
			return s.key
		}
	}
	return ""
}

func describeGoType(t string) string {
	switch {
	case t == "string":
		return "text"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	default:
		return "a mapping"
	}
}

func describeTag(tag string) string {
	switch tag {
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "str":
		return "text"
	case "int", "float":
		return "a number"
	case "bool":
		return "true/false"
	default:
		return "a value of type " + tag
	}
}

// pathAtLine finds the deepest key whose value starts at line with the given tag, as "a.b.0".
func pathAtLine(n *yaml.Node, line int, tag string, path []string) string {
	best := ""
	if n.Line == line && n.Tag == tag && len(path) > 0 {
		best = strings.Join(path, ".")
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p := pathAtLine(n.Content[i+1], line, tag, append(slices.Clip(path), n.Content[i].Value)); p != "" {
				best = p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if p := pathAtLine(c, line, tag, append(slices.Clip(path), strconv.Itoa(i))); p != "" {
				best = p
			}
		}
	}
	return best
}

// cleanYAMLError drops the "yaml: " prefix and any quoted value, which might be a secret.
func cleanYAMLError(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(msg, "a value")
}

func sortedNames(m map[string]*Profile) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
