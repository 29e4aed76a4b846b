package hooks

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/internal/config"
)

// HookFile is the name of the file that describes a hook in its folder.
const HookFile = "HOOK.yaml"

// Hook kinds.
const (
	KindCommand = "command"
	KindURL     = "url"
)

const (
	maxHookFile = 64 << 10 // a HOOK.yaml is a few lines
	maxOutput   = 1 << 20  // stdout of a program / body of a response
	maxStderr   = 4 << 10  // tail of stderr kept for the error message
)

// DirOptions configure how a hook directory loads.
type DirOptions struct {
	// Source prefixes each hook's source, e.g. "dir:/etc/gateway/hooks" or
	// "profile:NAME:hooks"; a hook's source is Source + "/" + its folder name.
	// Default "dir:" + the directory.
	Source string
	// Profile, when set, makes every hook see only events of sessions bound to it.
	Profile string
	// Timeout is the default for hooks whose HOOK.yaml sets none (zero: the bus default).
	Timeout time.Duration
	// HTTPClient is used by url hooks (default: one with the hook's timeout). Either
	// way a url hook never follows a redirect.
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Getenv expands ${VAR} in HOOK.yaml; nil means os.Getenv.
	Getenv func(string) string
	// Registry, when set, receives the commands and tools the hooks declare; a hook whose
	// command or tool clashes with one already there does not load (a LoadError).
	Registry *Registry
	// APIEnv gives the programs of hooks with api: true their variables
	// (GATEWAY_API_URL=..., GATEWAY_API_TOKEN=...). It is asked at each run, not at load:
	// the API's address may be known only once the gateway listens (a port 0 in
	// http.listen is chosen then).
	APIEnv func() []string
}

// LoadedHook describes one hook found in a directory.
type LoadedHook struct {
	Name    string        `json:"name"`
	Source  string        `json:"source"`
	Dir     string        `json:"dir"`
	Kind    string        `json:"kind"` // KindCommand or KindURL
	Events  []string      `json:"events"`
	Enabled bool          `json:"enabled"`
	Timeout time.Duration `json:"timeout,omitempty"` // from HOOK.yaml; 0: the default
	// Commands and Tools are what the hook declared under commands: and tools:.
	Commands []CommandSpec `json:"commands,omitempty"`
	Tools    []ToolSpec    `json:"tools,omitempty"`
	// API gives the program GATEWAY_API_URL and GATEWAY_API_TOKEN.
	API bool `json:"api,omitempty"`
}

// LoadError is a hook that could not be loaded, and why.
type LoadError struct {
	Path string // the hook's folder or HOOK.yaml, or the directory itself
	Err  error
}

func (e LoadError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e LoadError) Unwrap() error { return e.Err }

// Dir is a loaded hook directory: its hooks are registered on the bus until Close.
type Dir struct {
	path   string
	hooks  []LoadedHook
	errs   []LoadError
	mu     sync.Mutex
	scopes []*Scope
}

// hookSpec is a validated HOOK.yaml.
type hookSpec struct {
	LoadedHook
	command []string // argv; argv[0] absolute when it was a path
	url     *url.URL
	env     []string // names passed through from the gateway's environment
}

// LoadDir loads every hook folder of dir and registers the enabled ones on bus, each
// through its own Scope. It never fails as a whole: hooks that cannot load are listed in
// Errors (and logged) and the others still load. A missing directory loads nothing. What
// loaded is not logged here: a reload may still refuse the set, so the caller logs it
// (LogLoaded) once it takes the set.
func LoadDir(bus *Bus, dir string, opts DirOptions) *Dir {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Source == "" {
		opts.Source = "dir:" + dir
	}
	specs, errs := scanDir(dir, opts.Source, opts.Getenv)
	d := &Dir{path: dir, errs: errs}
	for _, e := range errs {
		opts.Logger.Warn("hook not loaded", "path", e.Path, "err", e.Err)
	}
	for _, s := range specs {
		if !s.Enabled {
			d.hooks = append(d.hooks, s.LoadedHook)
			continue
		}
		scope, err := register(bus, s, opts)
		if err != nil {
			// Not among Hooks: a listing built from them would show as loaded what never runs.
			d.errs = append(d.errs, LoadError{Path: s.Dir, Err: err})
			opts.Logger.Warn("hook not loaded", "path", s.Dir, "err", err)
			continue
		}
		d.hooks = append(d.hooks, s.LoadedHook)
		d.scopes = append(d.scopes, scope)
	}
	return d
}

// LogLoaded logs each hook of a set the gateway took (at startup, or a reload that was not
// refused): loaded, with its kind, events, commands and tools, or disabled.
func LogLoaded(log *slog.Logger, hooks []LoadedHook) {
	for _, h := range hooks {
		if !h.Enabled {
			log.Info("hook disabled", "source", h.Source)
			continue
		}
		// A hook that only declares commands or tools has no events: without them the line
		// would not say what it added.
		attrs := []any{"source", h.Source, "kind", h.Kind, "events", h.Events}
		if len(h.Commands) > 0 {
			names := make([]string, len(h.Commands))
			for i, c := range h.Commands {
				names[i] = "/" + c.Name
			}
			attrs = append(attrs, "commands", names)
		}
		if len(h.Tools) > 0 {
			names := make([]string, len(h.Tools))
			for i, t := range h.Tools {
				names[i] = t.Name
			}
			attrs = append(attrs, "tools", names)
		}
		log.Info("hook loaded", attrs...)
	}
}

// Path is the directory that was loaded.
func (d *Dir) Path() string { return d.path }

// Hooks lists the hooks that loaded, disabled ones included, in folder-name order; a hook
// that failed to load is in Errors only.
func (d *Dir) Hooks() []LoadedHook { return slices.Clone(d.hooks) }

// Errors lists the hooks that failed to load.
func (d *Dir) Errors() []LoadError { return slices.Clone(d.errs) }

// Close removes the directory's handlers from the bus. It is idempotent.
func (d *Dir) Close() {
	d.mu.Lock()
	scopes := d.scopes
	d.scopes = nil
	d.mu.Unlock()
	for _, s := range scopes {
		s.Close()
	}
}

func scanDir(dir, source string, getenv func(string) string) ([]hookSpec, []LoadError) {
	// A relative directory is taken against the working directory, once, here: a program runs
	// in its hook's folder, where a path relative to the working directory means nothing.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	entries, err := os.ReadDir(dir) // sorted by name: the load order
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []LoadError{{Path: dir, Err: err}}
	}
	var specs []hookSpec
	var errs []LoadError
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		folder := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(folder); err != nil || !fi.IsDir() {
			continue // files beside the hook folders (a README) are not hooks
		}
		s, err := parseHook(folder, getenv)
		if err != nil {
			errs = append(errs, LoadError{Path: folder, Err: err})
			continue
		}
		s.Source = source + "/" + e.Name()
		specs = append(specs, s)
	}
	return specs, errs
}

// isEnvName reports whether n is a portable environment variable name.
func isEnvName(n string) bool {
	for i, c := range n {
		ok := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return n != ""
}

// hookFile is the on-disk form of HOOK.yaml, decoded by the shared decoder
// (gateway/internal/config): strict, ${VAR} expanded, durations as in gateway.yaml.
type hookFile struct {
	Name    string        `yaml:"name"`
	Events  []string      `yaml:"events"`
	Command []string      `yaml:"command"`
	URL     string        `yaml:"url"`
	Timeout time.Duration `yaml:"timeout"`
	Enabled bool          `yaml:"enabled"`
	Env     []string      `yaml:"env"`
	// Extensions: commands and tools the program serves, and access to the admin API.
	Commands []hookCommand `yaml:"commands"`
	Tools    []hookTool    `yaml:"tools"`
	API      bool          `yaml:"api"`
}

// hookHints show the wanted form next to a value of the wrong type.
var hookHints = map[string]string{
	"events":  "write e.g. events: [message:receive]",
	"command": `write a list of arguments, e.g. command: ["./run.sh"]; it never runs through a shell`,
	"env":     "write a list of variable names, e.g. env: [MY_API_KEY]",
}

// parseHook reads and validates folder/HOOK.yaml. Errors name the file, line and key.
func parseHook(folder string, getenv func(string) string) (hookSpec, error) {
	s := hookSpec{LoadedHook: LoadedHook{Name: filepath.Base(folder), Dir: folder, Enabled: true}}
	f, err := os.Open(filepath.Join(folder, HookFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("no %s in this folder", HookFile)
	}
	if err != nil {
		return s, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHookFile+1))
	if err != nil {
		return s, err
	}
	if len(data) > maxHookFile {
		return s, fmt.Errorf("%s is larger than %d KiB", HookFile, maxHookFile>>10)
	}
	hf := hookFile{Name: s.Name, Enabled: true}
	root, errs := config.DecodeBytes(data, &hf, config.Options{File: HookFile, Getenv: getenv, Hints: hookHints})
	if err := errs.Err(); err != nil {
		return s, err
	}
	if root == nil {
		return s, fmt.Errorf("%s is empty: it needs at least events and command (or url)", HookFile)
	}
	bad := func(key, format string, args ...any) error {
		return config.At(HookFile, root, key, format, args...)
	}
	if strings.TrimSpace(hf.Name) == "" {
		return s, bad("name", "must not be empty")
	}
	s.Name, s.Events, s.Timeout, s.Enabled, s.env = hf.Name, hf.Events, hf.Timeout, hf.Enabled, hf.Env
	if hf.Timeout < 0 || (hf.Timeout == 0 && config.Find(root, "timeout") != nil) {
		return s, bad("timeout", "must be a positive duration (write e.g. 5s or 500ms)")
	}
	for i, n := range s.env {
		if !isEnvName(n) {
			return s, bad(fmt.Sprintf("env[%d]", i), "%q is not a variable name", n)
		}
	}
	s.API = hf.API
	if err := declared(hf, &s, bad); err != nil {
		return s, err
	}
	if len(s.Events) == 0 && len(s.Commands) == 0 && len(s.Tools) == 0 {
		return s, bad("events", "missing: list the events this hook handles, or [\"*\"] to observe all (or declare commands or tools)")
	}
	for i, ev := range s.Events {
		if ev == "*" {
			if len(s.Events) > 1 {
				return s, bad("events", `"*" already observes every event; list it alone`)
			}
			continue
		}
		info, ok := LookupEvent(ev)
		if !ok {
			return s, bad(fmt.Sprintf("events[%d]", i), "unknown event %q", ev)
		}
		if info.Declared {
			return s, bad(fmt.Sprintf("events[%d]", i), "%q is not an event to subscribe to: declare the hook's %ss under %ss:", ev, ev, ev)
		}
		if slices.Contains(s.Events[:i], ev) {
			return s, bad(fmt.Sprintf("events[%d]", i), "%q is listed twice", ev)
		}
	}
	hasCommand := config.Find(root, "command") != nil
	switch {
	case hasCommand && hf.URL != "":
		return s, bad("url", "give either command or url, not both")
	case hasCommand:
		if len(hf.Command) == 0 || hf.Command[0] == "" {
			return s, bad("command", "the list is empty: it needs at least the program")
		}
		s.command = hf.Command
		s.Kind = KindCommand
		// A disabled hook never runs: its program is looked for when it is enabled, so an
		// admin can switch off a hook whose program is gone without the reload being refused.
		if !s.Enabled {
			break
		}
		if err := resolveCommand(folder, s.command); err != nil {
			return s, bad("command", "%v", err)
		}
	case hf.URL != "":
		s.Kind = KindURL
		u, err := url.Parse(hf.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, bad("url", "want an http:// or https:// URL")
		}
		s.url = u
	default:
		return s, fmt.Errorf("%s: command or url is missing: say what runs the hook", HookFile)
	}
	return s, nil
}

// resolveCommand makes a relative program path absolute against the hook folder (a bare
// name is looked up in PATH, as a shell would) and checks that it can run, so that a hook
// that could not start is a load error, never a failure at message time.
func resolveCommand(folder string, argv []string) error {
	prog := argv[0]
	if !strings.ContainsRune(prog, filepath.Separator) && !strings.ContainsRune(prog, '/') {
		if _, err := exec.LookPath(prog); err != nil {
			if fi, serr := os.Stat(filepath.Join(folder, prog)); serr == nil && !fi.IsDir() {
				// The newcomer's mistake: the program sits in the hook's folder, and a
				// bare name is looked up in PATH only, as a shell would.
				return fmt.Errorf("program %q not found in PATH; for the %s in the hook's folder write [\"./%s\"]", prog, prog, prog)
			}
			return fmt.Errorf("program %q not found in PATH", prog)
		}
		return nil
	}
	if !filepath.IsAbs(prog) {
		prog = filepath.Join(folder, prog)
	}
	if abs, err := filepath.Abs(prog); err == nil {
		prog = abs
	}
	fi, err := os.Stat(prog)
	if err != nil {
		return fmt.Errorf("program %q not found", argv[0])
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("program %q is not executable (chmod +x it)", argv[0])
	}
	argv[0] = prog
	return nil
}

// register puts one hook on the bus through its own scope.
func register(bus *Bus, s hookSpec, opts DirOptions) (*Scope, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = opts.Timeout
	}
	var hopts []HandlerOption
	if timeout > 0 {
		hopts = append(hopts, WithTimeout(timeout))
	}
	if opts.Profile != "" {
		hopts = append(hopts, ForProfile(opts.Profile))
	}
	h := &hookHandler{name: s.Name, dir: s.Dir, observer: slices.Contains(s.Events, "*")}
	switch s.Kind {
	case KindCommand:
		x := newExecRunner(s, opts.Logger)
		if s.API {
			x.apiEnv = opts.APIEnv
		}
		h.invoke = x.invoke
	case KindURL:
		h.invoke = newURLRunner(s, timeout, opts.HTTPClient).invoke
	}
	if len(s.Commands)+len(s.Tools) > 0 {
		if opts.Registry == nil {
			return nil, errors.New("it declares commands or tools, which this gateway cannot take here")
		}
		if err := declare(opts.Registry, bus, s, h, timeout, opts.Profile); err != nil {
			return nil, err
		}
	}
	scope := bus.Scope(s.Source)
	for _, ev := range s.Events {
		if ev == "*" {
			scope.observe(h.handle, hopts...)
			continue
		}
		scope.On(ev, h.handle, hopts...)
	}
	return scope, nil
}
