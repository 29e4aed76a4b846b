package gatewaycli

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/slack"
	"gateway/channels/telegram"
	"gateway/channels/web"
	"gateway/cluster"
	"gateway/gateway"
	"gateway/harness"
	"gateway/harness/mcptools"
	"gateway/hooks"
	"gateway/internal/config"
	"gateway/internal/media"
	"gateway/internal/secret"
	"gateway/profiles"
)

// Config is the whole configuration file; each section is owned by the package it configures.
type Config struct {
	StateDir string             `mapstructure:"state_dir"`
	HTTP     HTTPConfig         `mapstructure:"http"`
	Log      LogConfig          `mapstructure:"log"`
	LLM      harness.Config     `mapstructure:"llm"`
	STT      stt.Config         `mapstructure:"stt"`
	TTS      tts.Config         `mapstructure:"tts"`
	Hooks    HooksConfig        `mapstructure:"hooks"`
	Profiles profiles.Config    `mapstructure:"profiles"`
	Bindings []profiles.Binding `mapstructure:"bindings"`
	Sessions gateway.Config     `mapstructure:"sessions"`
	Media    media.StoreConfig  `mapstructure:"media"`
	Channels ChannelsConfig     `mapstructure:"channels"`
	Admin    AdminConfig        `mapstructure:"admin"`
	// MCP lists MCP servers whose tools every profile's chats get (a profile may add its own).
	MCP     []mcptools.ServerConfig `mapstructure:"mcp"`
	Cluster cluster.Config          `mapstructure:"cluster"`
}

// AdminConfig guards the admin endpoints. Empty token: loopback clients only.
type AdminConfig struct {
	Token secret.Secret `mapstructure:"token"`
}

type HTTPConfig struct {
	Listen string `mapstructure:"listen"`
}

type LogConfig struct {
	Level  string `mapstructure:"level"`  // debug | info | warn | error
	Format string `mapstructure:"format"` // text (tint) | json
}

type HooksConfig struct {
	Dirs    []string      `mapstructure:"dirs"`
	Timeout time.Duration `mapstructure:"timeout"`
}

// WithDefaults is what a zero timeout means: the hook bus's default.
func (c HooksConfig) WithDefaults() HooksConfig {
	if c.Timeout <= 0 {
		c.Timeout = hooks.DefaultTimeout
	}
	return c
}

type ChannelsConfig struct {
	Web      web.Config      `mapstructure:"web"`
	Telegram telegram.Config `mapstructure:"telegram"`
	Discord  discord.Config  `mapstructure:"discord"`
	Slack    slack.Config    `mapstructure:"slack"`
}

// defaultConfig is what a gateway with no config file runs: the web chat on loopback and the
// echo provider, or OpenAI when OPENAI_API_KEY is set. Speech is on by default; whether it
// can run is decided after decoding (resolveSpeech), so that a section which sets only some
// keys keeps the defaults of the others.
func defaultConfig(getenv func(string) string) Config {
	llm := harness.Config{Provider: "echo", Model: "echo"}
	if key := getenv("OPENAI_API_KEY"); key != "" {
		// The value itself: a default is not a value of the file, so nothing would expand a
		// "${OPENAI_API_KEY}" here, and OpenAI would be sent those 17 characters as the key.
		llm = harness.Config{Provider: "openai", Model: harness.DefaultOpenAIModel, APIKey: secret.Secret(key)}
	}
	llm.Timeout, llm.MaxRetries = 2*time.Minute, 3
	// Platforms start closed: only allow_from may talk, and groups need a mention.
	access := channels.Access{AllowFrom: []string{}, DMPolicy: channels.DMAllowlist, RequireMention: true}
	return Config{
		StateDir: "./data",
		HTTP:     HTTPConfig{Listen: "127.0.0.1:8080"},
		Log:      LogConfig{Level: "info", Format: "text"},
		LLM:      llm,
		STT:      stt.DefaultConfig(),
		TTS:      tts.DefaultConfig(),
		Hooks:    HooksConfig{Dirs: defaultHookDirs(), Timeout: 10 * time.Second},
		// Under state_dir's default, as the hooks' folder is: ./profiles is a Go package here.
		Profiles: profiles.Config{Dir: "./data/profiles", Default: "assistant"},
		Sessions: gateway.Defaults(),
		Media:    media.StoreConfig{MaxAge: media.DefaultMaxAge, MaxBytes: media.DefaultMaxBytes},
		Channels: ChannelsConfig{
			Web:      web.Config{Enabled: true},
			Telegram: telegram.Config{APIURL: telegram.DefaultAPIURL, Mode: "polling", MaxFileBytes: telegram.DefaultMaxFileBytes, Access: access},
			Discord:  discord.Config{MaxFileBytes: discord.DefaultMaxFileBytes, Access: access},
			Slack:    slack.Config{Mode: "socket", MaxFileBytes: slack.DefaultMaxFileBytes, Access: access},
		},
	}
}

// defaultHookDirs is hooks.dirs when the config does not set it: under state_dir's default,
// not ./hooks, which in a clone of this repository is a Go package folder.
func defaultHookDirs() []string { return []string{"./data/hooks"} }

// resolveLLM keeps the defaults that belong to the default provider away from another one:
// a section that names its provider and not its model gets that provider's default model
// (never "echo"), and the OpenAI key is never sent to another provider.
func (c *Config) resolveLLM(explicit func(key string) bool) {
	// Nor is it sent to another server that speaks OpenAI's API (Ollama, OpenRouter, Groq):
	// the default key is OPENAI_API_KEY, given for OpenAI's own endpoint.
	if !explicit("llm.api_key") && c.LLM.BaseURL != "" && !isOpenAIEndpoint(c.LLM.BaseURL) {
		c.LLM.APIKey = ""
	}
	if !explicit("llm.provider") {
		// A section that names a model, a server or a key asks for a model, whether or not
		// OPENAI_API_KEY is set: echo would ignore all three and answer "no model is
		// configured" (an Ollama section without provider: openai). It means the
		// OpenAI-compatible API, as it does when the variable is set.
		asked := (explicit("llm.model") && c.LLM.Model != "echo") || (explicit("llm.base_url") && c.LLM.BaseURL != "") ||
			(explicit("llm.api_key") && c.LLM.APIKey.IsSet())
		if c.LLM.Provider == "echo" && asked {
			c.LLM.Provider = "openai"
			if !explicit("llm.model") {
				c.LLM.Model = harness.DefaultOpenAIModel
			}
		}
		return
	}
	if !explicit("llm.model") {
		switch c.LLM.Provider {
		case "openai":
			c.LLM.Model = harness.DefaultOpenAIModel
		case "echo":
			c.LLM.Model = "echo"
		case "anthropic":
			c.LLM.Model = "" // no default model: validate asks for one
		}
	}
	if !explicit("llm.api_key") && c.LLM.Provider != "openai" {
		c.LLM.APIKey = ""
	}
}

// isOpenAIEndpoint reports whether base is OpenAI's own API.
func isOpenAIEndpoint(base string) bool { return hostIs(base, "api.openai.com") }

// resolveSpeech turns speech off where the user did not ask for it and it cannot run: the
// openai provider with no key and no base_url of its own (a local server needs no key). A
// section that names a provider, or says enabled/mode itself, is taken as written.
func (c *Config) resolveSpeech(explicit func(key string) bool, getenv func(string) string) {
	noKey := func(provider string, key secret.Secret, baseURL string) bool {
		return (provider == "" || provider == "openai") && !key.IsSet() && baseURL == "" && getenv("OPENAI_API_KEY") == ""
	}
	if !explicit("stt.enabled") && noKey(c.STT.Provider, c.STT.APIKey, c.STT.BaseURL) {
		c.STT.Enabled = false
	}
	if !explicit("tts.mode") && noKey(c.TTS.Provider, c.TTS.APIKey, c.TTS.BaseURL) {
		c.TTS.Mode = tts.ModeOff
	}
	// A speech section without a key of its own uses OPENAI_API_KEY for OpenAI's API only,
	// as llm does: never for another server base_url names (a local Whisper or TTS server).
	key := secret.Secret(getenv("OPENAI_API_KEY"))
	openAI := func(provider, baseURL string) bool {
		return (provider == "" || provider == "openai") && (baseURL == "" || isOpenAIEndpoint(baseURL))
	}
	if !c.STT.APIKey.IsSet() && openAI(c.STT.Provider, c.STT.BaseURL) {
		c.STT.APIKey = key
	}
	if !c.TTS.APIKey.IsSet() && openAI(c.TTS.Provider, c.TTS.BaseURL) {
		c.TTS.APIKey = key
	}
}

// withDefaults is c as the gateway runs it: every section whose package fills in defaults
// after loading (0 or "" meaning "the default") has them filled in by its own WithDefaults,
// the one its constructor applies, so that check shows the values run uses. Sections are
// found by their WithDefaults method, not listed: a section that gains one is covered.
func (c Config) withDefaults() Config {
	applyDefaults(reflect.ValueOf(&c).Elem())
	return c
}

// applyDefaults replaces each field of the struct v that has a WithDefaults method by what
// it returns, and looks inside the other struct fields.
func applyDefaults(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		if m := f.MethodByName("WithDefaults"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 && m.Type().Out(0) == f.Type() {
			f.Set(m.Call(nil)[0])
			continue
		}
		if f.Kind() == reflect.Struct {
			applyDefaults(f)
		}
	}
}

// movedKeys are keys that moved (old path → new path). The gateway, not speech to text,
// echoes the transcript, so the setting lives in sessions.
var movedKeys = map[string]string{
	"stt.echo_transcript": "sessions.echo_transcript",
}

// configMap is the config as nested maps keyed like the YAML file, without moved keys.
func configMap(cfg Config, mask bool) map[string]any {
	m := toMap(cfg, mask).(map[string]any)
	for old := range movedKeys {
		parent, leaf, _ := strings.Cut(old, ".")
		if sec, ok := m[parent].(map[string]any); ok {
			delete(sec, leaf)
		}
	}
	return m
}

func envKey(key string) string {
	return "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// loadConfig reads path (optional: "" means defaults only) and the GATEWAY_* environment
// overrides, and decodes them onto the defaults with the shared decoder (internal/config):
// unknown keys, bad values and unset ${VAR} are errors that name the file, line and key (or
// the environment variable). It reports every problem it finds in one go; the config it
// returns is as complete as they allow.
func loadConfig(path string, getenv func(string) string) (Config, error) {
	cfg, _, errs, _ := load(path, getenv, nil)
	return cfg, errs.Err()
}

// loadClient is loadConfig for the commands that only call the running gateway (send,
// reload): problems outside the http and admin sections, which they do not read, are not
// theirs to report. A cron job that sets the admin token's variable alone is not refused
// for a platform token's ${VAR}.
func loadClient(path string, getenv func(string) string) (Config, error) {
	cfg, _, errs, _ := load(path, getenv, nil)
	var theirs config.Errors
	for _, e := range errs {
		if section := keySection(e.Key); e.Key == "" || section == "http" || section == "admin" {
			theirs = append(theirs, e)
		}
	}
	return cfg, theirs.Err()
}

// keySection is the top-level section a config key is in: "hooks" for "hooks.dirs[0]".
func keySection(key string) string {
	section, _, _ := strings.Cut(key, ".")
	section, _, _ = strings.Cut(section, "[")
	return section
}

// loadForProfiles is loadConfig for `profiles list`, which shows the profiles and bindings
// only: an unset ${VAR} of another section (a platform token or model key kept in the
// service's environment, not in the admin's shell) is not its to report. Every other
// problem is, since run would stop at it.
func loadForProfiles(path string, getenv func(string) string) (Config, error) {
	cfg, _, errs, _ := load(path, getenv, nil)
	var theirs config.Errors
	for _, e := range errs {
		if section := keySection(e.Key); e.Var == "" || section == "profiles" || section == "bindings" {
			theirs = append(theirs, e)
		}
	}
	return cfg, theirs.Err()
}

// envPrefix starts the name of every variable that sets a config key.
const envPrefix = "GATEWAY_"

// notKeys are the variables named with envPrefix that are not config keys: the config
// file's path, and what the gateway gives hook programs (which may run `gateway`).
func notKeys() []string {
	return []string{"GATEWAY_CONFIG", apiURLVar, apiTokenVar, "GATEWAY_HOOK_NAME", "GATEWAY_HOOK_DIR", "GATEWAY_HOOK_EVENT"}
}

// load is loadConfig, also returning the document (for the line of a key), the
// problems one by one, and whether the file (when there is one) was read and parsed: when
// not, its one problem says why, and the config is the defaults, not the file's. names, when given, are the environment's variable names: one that
// starts with GATEWAY_, is set, and is neither a key's variable, nor in notKeys, nor named
// by the file as ${VAR}, is a misspelt key, reported like an unknown key of the file.
func load(path string, getenv func(string) string, names []string) (Config, *yaml.Node, config.Errors, bool) {
	cfg := defaultConfig(getenv)
	// viper holds the key set (every key with its default) and tells which keys the file
	// sets; the values are decoded by the same decoder as profile.yaml and HOOK.yaml.
	v := viper.New()
	v.SetConfigType("yaml")
	keys := flatten(configMap(cfg, false), "")
	for key, val := range keys {
		v.SetDefault(key, val)
	}
	var root *yaml.Node
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, nil, config.Errors{{File: path, Msg: fmt.Sprintf("cannot read the config file: %v", errors.Unwrap(err))}}, false
		}
		if root, err = config.Parse(path, data); err != nil {
			var e *config.Error
			errors.As(err, &e)
			return cfg, nil, config.Errors{e}, false
		}
		if root != nil {
			_ = v.ReadConfig(bytes.NewReader(data)) // parsed above: it cannot fail
		}
	}
	// GATEWAY_<KEY_PATH> overrides any key: its value is grafted into the document, so it is
	// decoded (and its errors reported, naming the variable) like a value of the file. Done
	// by hand rather than with viper's AutomaticEnv so the environment can be passed in
	// (tests run the CLI in-process).
	origin := map[*yaml.Node]string{}
	var errs config.Errors
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		if val := getenv(envKey(key)); val != "" {
			_, list := keys[key].([]any)
			root = graft(root, key, val, list, envKey(key), origin)
		}
	}
	for _, old := range slices.Sorted(maps.Keys(movedKeys)) {
		if getenv(envKey(old)) != "" {
			errs = append(errs, &config.Error{File: envKey(old), Key: old, Msg: "this key moved: set " + envKey(movedKeys[old]) + " instead"})
		}
	}
	known := map[string]bool{}
	for key := range keys {
		known[envKey(key)] = true
	}
	for old := range movedKeys {
		known[envKey(old)] = true // reported above
	}
	for _, name := range notKeys() {
		known[name] = true
	}
	// A variable of the user's own that the file names as ${VAR} is not a misspelt key.
	lookup := func(name string) string {
		known[name] = true
		return getenv(name)
	}
	var unset config.Errors
	for _, e := range config.Decode(root, &cfg, config.Options{File: path, Getenv: lookup, Origin: origin, Moved: movedKeys}) {
		if e.Var != "" {
			unset = append(unset, e)
			continue
		}
		errs = append(errs, e)
	}
	errs = append(errs, unknownEnv(names, known, getenv)...)
	explicit := func(key string) bool { return v.InConfig(key) || getenv(envKey(key)) != "" }
	cfg.resolveLLM(explicit)
	cfg.resolveSpeech(explicit, getenv)
	// An unset variable matters only where it is used: the token of a disabled channel may
	// stay unset.
	for _, e := range unset {
		if cfg.inUse(e.Key) {
			errs = append(errs, e)
		}
	}
	return cfg, root, errs, true
}

// unknownEnv reports each set variable of names that starts with envPrefix and is not
// known, naming it (never its value: it may be a token) and the key it was likely meant for.
func unknownEnv(names []string, known map[string]bool, getenv func(string) string) config.Errors {
	var errs config.Errors
	for _, name := range slices.Sorted(slices.Values(names)) {
		if !strings.HasPrefix(name, envPrefix) || known[name] || getenv(name) == "" {
			continue
		}
		msg := "unknown variable: no config key is set by it"
		if like := likelyKey(name, known); like != "" {
			msg += " (did you mean " + like + "?)"
		} else {
			msg += " (a key's variable is GATEWAY_ and its path with _, e.g. GATEWAY_CHANNELS_TELEGRAM_TOKEN for channels.telegram.token)"
		}
		errs = append(errs, &config.Error{File: name, Msg: msg})
	}
	return errs
}

// likelyKey is the key variable name was most likely meant for: within two letters of one,
// or of its end (a section left out: GATEWAY_TELEGRAM_TOKEN); "" when none is that close.
func likelyKey(name string, known map[string]bool) string {
	rest := strings.TrimPrefix(name, envPrefix)
	best, bestDist := "", 3
	for _, k := range slices.Sorted(maps.Keys(known)) {
		if !strings.HasPrefix(k, envPrefix) {
			continue
		}
		tail := strings.TrimPrefix(k, envPrefix)
		for {
			if d := editDistance(rest, tail); d < bestDist {
				best, bestDist = k, d
			}
			i := strings.IndexByte(tail, '_')
			if i < 0 {
				break
			}
			tail = tail[i+1:]
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// graft sets key (a dotted path) to val in the document, creating the mappings on the way;
// list values are split at commas, or read as a list when written as one ([a, b]). The new nodes are marked with their origin.
func graft(root *yaml.Node, key, val string, list bool, from string, origin map[*yaml.Node]string) *yaml.Node {
	if root == nil {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	n := root
	parts := strings.Split(key, ".")
	for i, part := range parts {
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == part {
				next = n.Content[j+1]
			}
		}
		if i == len(parts)-1 {
			leaf := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: val}
			if list && strings.HasPrefix(strings.TrimSpace(val), "[") {
				// A list written as YAML or JSON (["1","2"]) is read as one, not cut at commas.
				var doc yaml.Node
				if yaml.Unmarshal([]byte(val), &doc) == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.SequenceNode {
					leaf = doc.Content[0]
					for _, c := range leaf.Content {
						origin[c] = from
					}
					list = false
				}
			}
			if list {
				leaf = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
				for _, item := range strings.Split(val, ",") {
					if item = strings.TrimSpace(item); item != "" {
						c := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: item}
						origin[c] = from
						leaf.Content = append(leaf.Content, c)
					}
				}
			}
			origin[leaf] = from
			replaced := false
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == part {
					n.Content[j+1], replaced = leaf, true
				}
			}
			if !replaced {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: part}, leaf)
			}
			return root
		}
		if next == nil || next.Kind != yaml.MappingNode {
			if next != nil {
				return root // the file has a value where a mapping belongs: reported there
			}
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			origin[next] = from
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: part}, next)
		}
		n = next
	}
	return root
}

// loadChecked is loadConfig then validate, with every problem of both, each once. A
// validation problem names its key; when the file sets that key, its line is added.
func loadChecked(path string, getenv func(string) string) (Config, error) {
	return loadStrict(path, getenv, nil)
}

// loadStrict is loadChecked, also refusing a GATEWAY_ variable of names that sets no key:
// what check and startup load. (A reload runs in the environment startup checked.) A file
// that cannot be read or is not YAML is an *unreadError, and nothing else is checked: the
// config it comes with is the defaults, which the file never reached.
func loadStrict(path string, getenv func(string) string, names []string) (Config, error) {
	return loadValidated(path, getenv, names, func(string) bool { return true })
}

// loadForHooks is loadChecked for `hooks list`, which builds the hooks and nothing else: an
// unset ${VAR} outside the sections it reads (a platform token or the model's key, kept in
// the service's environment, not in the admin's shell) is not its to report. Every other
// problem is, since run would stop at it.
func loadForHooks(path string, getenv func(string) string) (Config, error) {
	return loadValidated(path, getenv, nil, func(key string) bool {
		switch keySection(key) {
		case "state_dir", "hooks", "profiles", "bindings":
			return true
		}
		return false
	})
}

// loadValidated is loadStrict reporting an unset ${VAR} only for the keys needsVar accepts.
// A key whose variable is unset is never also reported by validation ("token is
// required"), whether or not its variable is reported.
func loadValidated(path string, getenv func(string) string, names []string, needsVar func(key string) bool) (Config, error) {
	cfg, root, errs, read := load(path, getenv, names)
	if !read {
		return cfg, &unreadError{errs[0]}
	}
	lines := make([]string, 0, len(errs))
	unsetKeys := map[string]bool{}
	for _, e := range errs {
		if e.Var != "" {
			unsetKeys[e.Key] = true
			if !needsVar(e.Key) {
				continue
			}
		}
		lines = append(lines, e.Error())
	}
	if verr := cfg.validate(); verr != nil {
		for _, l := range strings.Split(verr.Error(), "\n") {
			key := problemKey(l)
			// A key whose variable is unset is already reported; "token is required" says it again.
			if unsetKeys[key] {
				continue
			}
			l = locate(path, root, getenv, key, l)
			if !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) > 0 {
		return cfg, errors.New(strings.Join(lines, "\n"))
	}
	return cfg, nil
}

// unreadError is a config file that could not be read or is not YAML: none of it was
// loaded, so there is no config beside it to show or check.
type unreadError struct{ err *config.Error }

func (e *unreadError) Error() string { return e.err.Error() }

// locate prefixes the problem line l about key with where the value came from: the
// GATEWAY_ variable that set it, or the file and line, when either is known.
func locate(path string, root *yaml.Node, getenv func(string) string, key, l string) string {
	if name := setBy(key, getenv); name != "" {
		return name + ": " + l // the variable's value overrides the file's
	}
	if key != "" && root != nil && path != "" {
		if at := config.At(path, root, key, "%s", l); at.Line > 0 {
			return fmt.Sprintf("%s:%d: %s", path, at.Line, l)
		}
	}
	return l
}

// locateProfileErrors adds to each problem of loading the profiles that is about a key of the
// config file (a binding naming a profile that does not exist, profiles.default) the file and
// line, or the variable, that set it; the problems of profile.yaml files name their own.
func locateProfileErrors(path string, getenv func(string) string, err error) error {
	if err == nil {
		return nil
	}
	var root *yaml.Node
	if path != "" {
		if data, rerr := os.ReadFile(path); rerr == nil {
			root, _ = config.Parse(path, data)
		}
	}
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "bindings[") || strings.HasPrefix(l, "profiles.") {
			lines[i] = locate(path, root, getenv, problemKey(l), l)
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// setBy is the GATEWAY_ variable that set key or the key holding it ("GATEWAY_BINDINGS"
// for bindings[0].match.channel), or "" when the environment set neither.
func setBy(key string, getenv func(string) string) string {
	path, _, _ := strings.Cut(key, "[") // a variable sets a whole list, never one item
	for path != "" {
		if getenv(envKey(path)) != "" {
			return envKey(path)
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return ""
}

// problemKey is the key path a validation message starts with ("llm.model: ..." or
// "channels.telegram.token is required ..."), or "".
func problemKey(line string) string {
	i := strings.IndexAny(line, ": ")
	if i <= 0 || strings.ContainsAny(line[:i], "\"'()") {
		return ""
	}
	return line[:i]
}

// inUse reports whether the config key (a dotted path) belongs to a part that runs: a
// disabled channel, or speech that is off, is not.
func (c Config) inUse(key string) bool {
	parts := strings.SplitN(key, ".", 3)
	switch {
	case parts[0] == "channels" && len(parts) > 1:
		switch parts[1] {
		case "web":
			return c.Channels.Web.Enabled
		case "telegram":
			return c.Channels.Telegram.Enabled
		case "discord":
			return c.Channels.Discord.Enabled
		case "slack":
			return c.Channels.Slack.Enabled
		}
	case parts[0] == "stt":
		return c.STT.Enabled
	case parts[0] == "tts":
		return c.TTS.Mode != tts.ModeOff
	}
	return true
}

// toMap turns a config struct into nested maps keyed like the YAML file. With mask, secrets
// print as <redacted>; durations print as strings either way.
// maskURL hides what a URL may carry as a secret: the password of its user info and the
// values of its query (an API key in ?key=). A value that is not a URL is shown as it is.
func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.User == nil && u.RawQuery == "") {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func toMap(v any, mask bool) any {
	return toMapValue(reflect.ValueOf(v), mask)
}

var (
	secretType   = reflect.TypeFor[secret.Secret]()
	durationType = reflect.TypeFor[time.Duration]()
)

func toMapValue(rv reflect.Value, mask bool) any {
	switch {
	case rv.Type() == secretType:
		s := secret.Secret(rv.String())
		if mask {
			return s.String()
		}
		return s.Reveal()
	case rv.Type() == durationType:
		return time.Duration(rv.Int()).String()
	}
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
		return toMapValue(rv.Elem(), mask)
	case reflect.Struct:
		out := map[string]any{}
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("mapstructure")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
			if opts == "squash" || (f.Anonymous && name == "") {
				if m, ok := toMapValue(rv.Field(i), mask).(map[string]any); ok {
					for k, v := range m {
						out[k] = v
					}
				}
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if fv := rv.Field(i); mask && fv.Kind() == reflect.String && strings.HasSuffix(name, "url") {
				out[name] = maskURL(fv.String())
				continue
			}
			out[name] = toMapValue(rv.Field(i), mask)
		}
		return out
	case reflect.Slice:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		out := make([]any, rv.Len())
		for i := range rv.Len() {
			out[i] = toMapValue(rv.Index(i), mask)
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range rv.MapKeys() {
			out[fmt.Sprint(k.Interface())] = toMapValue(rv.MapIndex(k), mask)
		}
		return out
	}
	return rv.Interface()
}

// flatten lists leaf keys as dotted paths ("channels.telegram.token") for viper defaults.
func flatten(v any, prefix string) map[string]any {
	out := map[string]any{}
	m, ok := v.(map[string]any)
	if !ok {
		out[prefix] = v
		return out
	}
	for k, val := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		for fk, fv := range flatten(val, key) {
			out[fk] = fv
		}
	}
	return out
}

// validate checks every section; each error names its key.
func (c Config) validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.StateDir == "" {
		add(errors.New("state_dir: must not be empty"))
	}
	seenMCP := map[string]bool{}
	for i, m := range c.MCP {
		if err := m.Validate(); err != nil {
			add(fmt.Errorf("mcp.%d: %w", i, err))
		} else if seenMCP[m.Name] {
			add(fmt.Errorf("mcp.%d: server %q listed twice", i, m.Name))
		}
		seenMCP[m.Name] = true
	}
	add(c.Cluster.Validate())
	add(c.validateListen())
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add(fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add(fmt.Errorf("log.format: %q is not text or json", c.Log.Format))
	}
	switch c.LLM.Provider {
	case "anthropic":
		if c.LLM.Model == "" {
			add(errors.New("llm.model: required with provider anthropic (e.g. claude-sonnet-4-5)"))
		}
	case "openai", "fake", "echo":
	default:
		add(fmt.Errorf("llm.provider: %q is not one of openai, anthropic, fake, echo", c.LLM.Provider))
	}
	// Checked as profile.yaml checks its own llm section: otherwise `check` passes and every
	// message fails (an Ollama address written without http://).
	if c.LLM.BaseURL != "" {
		// The URL is not echoed: it may carry credentials.
		if u, err := url.Parse(c.LLM.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(errors.New("llm.base_url: must be an http:// or https:// URL (e.g. http://127.0.0.1:11434/v1)"))
		}
	}
	switch cw := c.LLM.ContextWindow; {
	case cw < 0:
		add(fmt.Errorf("llm.context_window: %d is negative; write the model's context window in tokens, or 0 for the known default", cw))
	case cw > 0 && cw < 1024:
		add(fmt.Errorf("llm.context_window: %d tokens is too small to hold a conversation (at least 1024)", cw))
	}
	if c.LLM.MaxRetries < 0 {
		add(errors.New("llm.max_retries: must not be negative (0 makes one call and no retries)"))
	}
	if c.Hooks.Timeout < 0 {
		add(errors.New("hooks.timeout: must not be negative"))
	}
	if c.Media.MaxAge < 0 {
		add(errors.New("media.max_age: must not be negative (0 takes the default, 720h)"))
	}
	if c.Media.MaxBytes < 0 {
		add(errors.New("media.max_bytes: must not be negative (0 takes the default, 1000000000)"))
	}
	add(c.Sessions.Validate())
	if c.STT.Enabled {
		add(c.STT.Validate())
	}
	add(c.TTS.Validate())
	if c.Channels.Telegram.Enabled {
		add(c.Channels.Telegram.Validate())
	}
	if c.Channels.Discord.Enabled {
		add(c.Channels.Discord.Validate())
	}
	if c.Channels.Slack.Enabled {
		add(c.Channels.Slack.Validate())
	}
	for i, b := range c.Bindings {
		if b.Profile == "" {
			add(fmt.Errorf("bindings[%d].profile: must name a profile", i))
		}
		// A misspelt channel would make a binding that never matches, silently.
		switch b.Match.Channel {
		case "", telegram.Name, discord.Name, slack.Name, web.Name:
		default:
			add(fmt.Errorf("bindings[%d].match.channel: %q is not one of telegram, discord, slack, web", i, b.Match.Channel))
		}
	}
	return errors.Join(errs...)
}

// validateListen checks http.listen, and that a gateway reachable from other machines is not
// an open bot: the admin API and the web chat carry no login of their own, so listening
// beyond loopback needs their tokens.
func (c Config) validateListen() error {
	host, port, err := net.SplitHostPort(c.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %q is not host:port (write e.g. 127.0.0.1:8080, or 0.0.0.0:8080 for every interface)", c.HTTP.Listen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("http.listen: %q has no valid port (write e.g. 127.0.0.1:8080)", c.HTTP.Listen)
	}
	if isLoopbackHost(host) {
		return nil
	}
	var errs []error
	if !c.Admin.Token.IsSet() {
		errs = append(errs, fmt.Errorf("admin.token: required because http.listen %q is reachable from other machines; set it (or GATEWAY_ADMIN_TOKEN) to a long random string, or listen on 127.0.0.1", c.HTTP.Listen))
	}
	if c.Channels.Web.Enabled && !c.Channels.Web.Token.IsSet() {
		errs = append(errs, fmt.Errorf("channels.web.token: required because http.listen %q is reachable from other machines; set it (or GATEWAY_CHANNELS_WEB_TOKEN) to the password the web chat will ask for, or listen on 127.0.0.1", c.HTTP.Listen))
	}
	return errors.Join(errs...)
}

// isLoopbackHost reports whether a listen host reaches this machine only ("" is every interface).
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
