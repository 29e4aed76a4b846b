package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/slack"
	"gateway/channels/telegram"
	"gateway/channels/web"
	"gateway/gateway"
	"gateway/harness"
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

type ChannelsConfig struct {
	Web      web.Config      `mapstructure:"web"`
	Telegram telegram.Config `mapstructure:"telegram"`
	Discord  discord.Config  `mapstructure:"discord"`
	Slack    slack.Config    `mapstructure:"slack"`
}

// defaultConfig is what a gateway with no config file runs: the web chat on loopback and the
// echo provider, or OpenAI when OPENAI_API_KEY is set.
func defaultConfig(getenv func(string) string) Config {
	llm := harness.Config{Provider: "echo", Model: "echo"}
	if getenv("OPENAI_API_KEY") != "" {
		llm = harness.Config{Provider: "openai", Model: "gpt-4o-mini", APIKey: "${OPENAI_API_KEY}"}
	}
	llm.Timeout, llm.MaxRetries = 2*time.Minute, 3
	sttCfg, ttsCfg := stt.DefaultConfig(), tts.DefaultConfig()
	if llm.Provider != "openai" {
		// Without a speech provider, voice notes get a plain "not configured" answer.
		sttCfg.Enabled = false
		ttsCfg.Mode = "off"
	}
	// Platforms start closed: only allow_from may talk, and groups need a mention.
	access := channels.Access{AllowFrom: []string{}, DMPolicy: channels.DMAllowlist, RequireMention: true}
	return Config{
		StateDir: "./data",
		HTTP:     HTTPConfig{Listen: "127.0.0.1:8080"},
		Log:      LogConfig{Level: "info", Format: "text"},
		LLM:      llm,
		STT:      sttCfg,
		TTS:      ttsCfg,
		Hooks:    HooksConfig{Dirs: []string{"./hooks"}, Timeout: 10 * time.Second},
		Profiles: profiles.Config{Dir: "./profiles", Default: "assistant"},
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

// loadConfig reads path (optional: "" means defaults only), then GATEWAY_* environment
// overrides, expands ${VAR} in values and decodes strictly: unknown keys and bad values are
// errors that name the key.
func loadConfig(path string, getenv func(string) string) (Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	cfg := defaultConfig(getenv)
	keys := flatten(toMap(cfg, false), "")
	for key, val := range keys {
		v.SetDefault(key, val)
	}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		defer f.Close()
		if err := v.ReadConfig(f); err != nil {
			return cfg, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	// GATEWAY_<KEY_PATH> overrides any key. This is viper's AutomaticEnv, done by hand so the
	// environment can be passed in (tests run the CLI in-process).
	for key := range keys {
		if val := getenv("GATEWAY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))); val != "" {
			v.Set(key, val)
		}
	}
	var out Config
	var errs []error
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           &out,
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			expandEnvHook(getenv, &errs),
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
	})
	if err != nil {
		return cfg, err
	}
	if err := dec.Decode(v.AllSettings()); err != nil {
		return cfg, friendlyDecodeError(err)
	}
	if len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnvHook replaces ${VAR} in every string value; a variable that is not set is an error
// (an empty token is better reported than sent).
func expandEnvHook(getenv func(string) string, errs *[]error) mapstructure.DecodeHookFuncType {
	return func(from, to reflect.Type, data any) (any, error) {
		s, ok := data.(string)
		if !ok || !strings.Contains(s, "${") {
			return data, nil
		}
		return envRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := ref[2 : len(ref)-1]
			val := getenv(name)
			if val == "" {
				*errs = append(*errs, fmt.Errorf("environment variable %s is used in the config but not set", name))
			}
			return val
		}), nil
	}
}

// friendlyDecodeError rewrites mapstructure's messages so each line names the key.
func friendlyDecodeError(err error) error {
	var lines []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "* "))
		if line == "" || strings.HasPrefix(line, "decoding failed due to the following error") {
			continue
		}
		if i := strings.Index(line, "has invalid keys: "); i >= 0 {
			prefix := strings.Trim(line[:i], "' ")
			for _, k := range strings.Split(line[i+len("has invalid keys: "):], ", ") {
				if prefix != "" {
					k = prefix + "." + k
				}
				lines = append(lines, fmt.Sprintf("unknown key %q", k))
			}
			continue
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return errors.New(strings.Join(lines, "\n"))
}

// toMap turns a config struct into nested maps keyed like the YAML file. With mask, secrets
// print as <redacted>; durations print as strings either way.
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
	if c.HTTP.Listen == "" {
		add(errors.New("http.listen: must not be empty"))
	}
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
	case "openai", "anthropic", "fake", "echo":
	default:
		add(fmt.Errorf("llm.provider: %q is not one of openai, anthropic, fake, echo", c.LLM.Provider))
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
	}
	return errors.Join(errs...)
}
