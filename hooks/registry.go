package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"gateway/internal/llm"
)

// CommandSpec is a command a hook declares under commands: in HOOK.yaml.
type CommandSpec struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description" yaml:"description"`
}

// ToolSpec is a tool a hook declares under tools: in HOOK.yaml. Parameters is a JSON
// Schema object; Timeout bounds one call (0: the hook's timeout; a RegisteredTool's is
// always the bound that applies).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Timeout     time.Duration   `json:"timeout,omitempty"`
}

// isCommandName reports whether s is what every platform's menu accepts: 1 to 32
// lowercase letters, digits or _.
func isCommandName(s string) bool {
	return llm.IsName(s, 32) && !strings.ContainsFunc(s, func(r rune) bool { return r == '-' || 'A' <= r && r <= 'Z' })
}

// hookCommand and hookTool are the HOOK.yaml forms of a declared command and tool.
type hookCommand struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

type hookTool struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	Parameters  map[string]any `yaml:"parameters"`
	Timeout     time.Duration  `yaml:"timeout"`
}

// declared validates the commands and tools of a HOOK.yaml into s. bad names the key.
func declared(hf hookFile, s *hookSpec, bad func(key, format string, args ...any) error) error {
	for i, c := range hf.Commands {
		key := fmt.Sprintf("commands[%d]", i)
		switch {
		case !isCommandName(c.Name):
			return bad(key+".name", "%q: use 1 to 32 lowercase letters, digits or _ (no leading /)", c.Name)
		case strings.TrimSpace(c.Description) == "":
			return bad(key+".description", "missing: it is shown in /help and the platforms' menus")
		case slices.ContainsFunc(s.Commands, func(x CommandSpec) bool { return x.Name == c.Name }):
			return bad(key+".name", "command %q is declared twice", c.Name)
		}
		s.Commands = append(s.Commands, CommandSpec(c))
	}
	for i, t := range hf.Tools {
		key := fmt.Sprintf("tools[%d]", i)
		switch {
		case !llm.IsName(t.Name, 64):
			return bad(key+".name", "%q: use 1 to 64 letters, digits, _ or -", t.Name)
		case strings.TrimSpace(t.Description) == "":
			return bad(key+".description", "missing: the model reads it to know when to call the tool")
		case t.Timeout < 0:
			return bad(key+".timeout", "must be a positive duration (write e.g. 5s)")
		case slices.ContainsFunc(s.Tools, func(x ToolSpec) bool { return x.Name == t.Name }):
			return bad(key+".name", "tool %q is declared twice", t.Name)
		}
		if t.Parameters == nil {
			t.Parameters = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		if err := objectSchema(t.Parameters, key+".parameters", bad); err != nil {
			return err
		}
		p, err := json.Marshal(t.Parameters)
		if err != nil {
			return bad(key+".parameters", "%v", err)
		}
		s.Tools = append(s.Tools, ToolSpec{Name: t.Name, Description: t.Description, Parameters: p, Timeout: t.Timeout})
	}
	return nil
}

// objectSchema checks the top of a tool's parameters as the providers do: they refuse every
// request carrying a tool whose parameters are not an object schema, so each turn of every
// chat that has the tool would fail, long after the hook loaded.
func objectSchema(p map[string]any, key string, bad func(key, format string, args ...any) error) error {
	if typ, ok := p["type"]; ok && typ != "object" {
		return bad(key+".type", "%q: a tool's parameters are an object (type: object, properties: {...})", fmt.Sprint(typ))
	}
	if props, ok := p["properties"]; ok {
		if _, isMap := props.(map[string]any); !isMap {
			return bad(key+".properties", "want a mapping of each argument's name to its schema")
		}
	}
	if req, ok := p["required"]; ok {
		list, isList := req.([]any)
		if !isList {
			return bad(key+".required", "want a list of argument names")
		}
		for _, r := range list {
			if _, isStr := r.(string); !isStr {
				return bad(key+".required", "want a list of argument names")
			}
		}
	}
	return nil
}

// RegisteredCommand is a command of the registry: a builtin (Run nil) or a hook's.
type RegisteredCommand struct {
	Name        string
	Description string
	Source      string // "builtin" or the hook's source
	Profile     string // set: only sessions bound to this profile have it
	// Run asks the hook that declared the command; nil for a builtin.
	Run func(ctx context.Context, ev *Command) (*CommandResult, error) `json:"-"`
}

// RegisteredTool is a tool a hook declared.
type RegisteredTool struct {
	ToolSpec
	Source  string
	Profile string
	Run     func(ctx context.Context, ev *Tool) (*ToolOutput, error) `json:"-"`

	// taken, for a name reserved by ReserveBuiltinTools or ReserveMCPServer (Run nil),
	// says in plain words what already has it and fix what the admin can do; prefix: every
	// name that starts with Name is taken.
	taken, fix string
	prefix     bool
}

// Registry holds the commands (builtin and declared) and the declared tools of one
// runtime. A name is unique among what one session can see: a clash is a load error.
type Registry struct {
	mu       sync.Mutex
	commands []RegisteredCommand
	tools    []RegisteredTool
}

// NewRegistry returns a registry holding the builtin commands.
func NewRegistry(builtins []RegisteredCommand) *Registry {
	r := &Registry{}
	for _, c := range builtins {
		if c.Source == "" {
			c.Source = "builtin"
		}
		r.commands = append(r.commands, c)
	}
	return r
}

// overlaps tells whether sessions of profile a and of profile b can be the same ("" is every profile).
func overlaps(a, b string) bool { return a == "" || b == "" || a == b }

// add registers a hook's commands and tools, all or none.
func (r *Registry) add(cmds []RegisteredCommand, tools []RegisteredTool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cmds {
		for _, x := range r.commands {
			if x.Name == c.Name && overlaps(x.Profile, c.Profile) {
				return fmt.Errorf("command /%s clashes: declared by %s and by %s", c.Name, x.Source, c.Source)
			}
		}
	}
	for _, t := range tools {
		for _, x := range r.tools {
			if !overlaps(x.Profile, t.Profile) {
				continue
			}
			switch {
			case x.taken != "" && (x.Name == t.Name || x.prefix && strings.HasPrefix(t.Name, x.Name)):
				return fmt.Errorf("tool %s clashes with %s; only one of the two would ever run: %s", t.Name, x.taken, x.fix)
			case x.taken == "" && x.Name == t.Name:
				return fmt.Errorf("tool %s clashes: declared by %s and by %s", t.Name, x.Source, t.Source)
			}
		}
	}
	r.commands = append(r.commands, cmds...)
	r.tools = append(r.tools, tools...)
	return nil
}

// ReserveBuiltinTools tells the registry that sessions of profile have the named builtin
// tools (its profile.yaml's tools:), so that a hook declaring a tool of one of these names
// for those sessions fails to load, as a clashing command does, instead of being shadowed.
// Call it before the hook directories load.
func (r *Registry) ReserveBuiltinTools(profile string, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.tools = append(r.tools, RegisteredTool{ToolSpec: ToolSpec{Name: n}, Source: "builtin", Profile: profile,
			taken: fmt.Sprintf("the builtin tool %s that profile %q lists in its tools", n, profile),
			fix:   fmt.Sprintf("rename the hook's tool, or take %s out of the profile's tools", n)})
	}
}

// ReserveMCPServer tells the registry that sessions of profile ("": every profile) have
// the tools of the MCP server, named "<server>__<tool>" for the model. Which tools it has is
// known only once it is reached, so a hook tool whose name starts with "<server>__" fails
// to load: it would shadow, or be shadowed by, one of the server's.
func (r *Registry) ReserveMCPServer(profile, server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	where := "the top-level mcp:"
	if profile != "" {
		where = fmt.Sprintf("profile %q's mcp:", profile)
	}
	r.tools = append(r.tools, RegisteredTool{ToolSpec: ToolSpec{Name: server + "__"}, Source: "mcp:" + server, Profile: profile, prefix: true,
		taken: fmt.Sprintf("the tools of MCP server %s (%s), which reach the model as %s__<tool>", server, where, server),
		fix:   "rename the hook's tool"})
}

// Command finds the named command as a session of profile sees it.
func (r *Registry) Command(name, profile string) (RegisteredCommand, bool) {
	if r == nil {
		return RegisteredCommand{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.commands {
		if c.Name == name && (c.Profile == "" || c.Profile == profile) {
			return c, true
		}
	}
	return RegisteredCommand{}, false
}

// Commands lists the commands a session of profile sees, builtins first, in load order.
// An empty profile lists the commands every profile has.
func (r *Registry) Commands(profile string) []RegisteredCommand {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RegisteredCommand
	for _, c := range r.commands {
		if c.Profile == "" || c.Profile == profile {
			out = append(out, c)
		}
	}
	return out
}

// Tools lists the declared tools a session of profile sees (not the reserved names).
func (r *Registry) Tools(profile string) []RegisteredTool {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RegisteredTool
	for _, t := range r.tools {
		if t.Run != nil && (t.Profile == "" || t.Profile == profile) {
			out = append(out, t)
		}
	}
	return out
}

// declare registers a loaded hook's commands and tools, served by h. Their calls do not
// go through an emit of bus, so a failure is counted (and a tool's logged) here.
func declare(reg *Registry, bus *Bus, s hookSpec, h *hookHandler, timeout time.Duration, profile string) error {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	call := func(ctx context.Context, ev Event, d time.Duration) (any, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		res, err := h.handle(cctx, ev)
		// A call the user stopped is not the hook's failure; a timeout, a crash or bad
		// output is, even though only the model (a tool's) or the chat (a command's) is told.
		if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			bus.declaredFailed(s.Source, ev, err)
		}
		return res, err
	}
	var cmds []RegisteredCommand
	for _, c := range s.Commands {
		cmds = append(cmds, RegisteredCommand{Name: c.Name, Description: c.Description, Source: s.Source, Profile: profile,
			Run: func(ctx context.Context, ev *Command) (*CommandResult, error) {
				res, err := call(ctx, ev, timeout)
				r, _ := res.(*CommandResult)
				if r == nil {
					r = &CommandResult{}
				}
				return r, err
			}})
	}
	var tools []RegisteredTool
	for _, t := range s.Tools {
		d := t.Timeout
		if d <= 0 {
			d = timeout
		}
		// The bound the call has, told to whoever runs the tool: the harness cuts a tool at
		// the timeout it reports (30s when none), which would cut a slower hook's short.
		t.Timeout = d
		tools = append(tools, RegisteredTool{ToolSpec: t, Source: s.Source, Profile: profile,
			Run: func(ctx context.Context, ev *Tool) (*ToolOutput, error) {
				res, err := call(ctx, ev, d)
				r, _ := res.(*ToolOutput)
				if r == nil {
					r = &ToolOutput{}
				}
				return r, err
			}})
	}
	return reg.add(cmds, tools)
}
