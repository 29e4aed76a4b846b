// Package mcptools gives the agent the tools of MCP servers (github.com/modelcontextprotocol/go-sdk):
// stdio servers are started once and supervised (restarted with backoff, stopped with the
// gateway); streamable HTTP servers are connected and reconnected the same way. A server's
// tools reach the model as "<server>__<tool>"; a server that is down has no tools, so turns
// go on without them.
package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"gateway/harness"
	"gateway/internal/childproc"
	"gateway/internal/llm"
	"gateway/internal/secret"
)

// ServerConfig is one entry of `mcp:` (top level or a profile's): a stdio server
// ({name, command, env}) or a streamable HTTP one ({name, url, headers}).
type ServerConfig struct {
	Name    string                   `mapstructure:"name" yaml:"name" json:"name"`
	Command []string                 `mapstructure:"command" yaml:"command" json:"command,omitempty"`
	Env     map[string]secret.Secret `mapstructure:"env" yaml:"env" json:"-"` // may hold keys: masked when shown
	URL     string                   `mapstructure:"url" yaml:"url" json:"url,omitempty"`
	Headers map[string]secret.Secret `mapstructure:"headers" yaml:"headers" json:"-"`
}

// Validate names what is wrong with the server's entry.
func (c ServerConfig) Validate() error {
	switch {
	case !llm.IsName(c.Name, 32):
		return fmt.Errorf("mcp: name %q: use 1 to 32 letters, digits, _ or - (tools are named <name>__<tool>)", c.Name)
	case len(c.Command) > 0 && c.URL != "":
		return fmt.Errorf("mcp %s: give either command (stdio) or url (streamable HTTP), not both", c.Name)
	case len(c.Command) == 0 && c.URL == "":
		return fmt.Errorf("mcp %s: command (stdio) or url (streamable HTTP) is missing", c.Name)
	case c.URL != "" && !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return fmt.Errorf("mcp %s: url: want an http:// or https:// URL", c.Name)
	}
	return nil
}

// CheckOffline is what can be told of the entry without starting or reaching its server
// (for `gateway check`): Validate, then that a stdio command names a program that exists
// and may be run (found on PATH, or at its path relative to the working folder), and that
// a url is a well-formed http(s) address.
func (c ServerConfig) CheckOffline() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if len(c.Command) > 0 {
		if _, err := exec.LookPath(c.Command[0]); err != nil {
			// The reason alone ("executable file not found in $PATH", "permission denied"):
			// the program is named once, by the message.
			var ee *exec.Error
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			} else if errors.As(err, &ee) {
				err = ee.Err
			}
			return fmt.Errorf("mcp %s: command %q: %v", c.Name, c.Command[0], err)
		}
		return nil
	}
	if u, err := url.Parse(c.URL); err != nil || u.Host == "" {
		return fmt.Errorf("mcp %s: url: not a well-formed http(s) URL (write e.g. http://127.0.0.1:3000/mcp)", c.Name)
	}
	return nil
}

// Options tune the supervision.
type Options struct {
	Logger *slog.Logger
	// CallTimeout bounds one tool call (default 60s; the harness's tool timeout may end it first).
	CallTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart (default 1s and 1m).
	MinBackoff, MaxBackoff time.Duration
	HTTPClient             *http.Client
}

// Manager holds the connections to a set of MCP servers.
type Manager struct {
	opts    Options
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	servers []*server
}

type server struct {
	cfg  ServerConfig
	opts *Options

	mu      sync.Mutex
	session *mcp.ClientSession
	tools   []*mcp.Tool
	ready   chan struct{} // closed after the first attempt to connect
}

// Start connects to every server in the background and keeps them up until Close. It
// returns at once; Wait waits for the first attempt of each.
func Start(servers []ServerConfig, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 60 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, cancel: cancel}
	for _, c := range servers {
		s := &server{cfg: c, opts: &m.opts, ready: make(chan struct{})}
		m.servers = append(m.servers, s)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.supervise(ctx)
		}()
	}
	return m
}

// Wait returns when every server had its first attempt to connect, or ctx ends.
func (m *Manager) Wait(ctx context.Context) {
	for _, s := range m.servers {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return
		}
	}
}

// Close stops every server (a stdio server's process ends) and waits for the supervisors.
func (m *Manager) Close() {
	if m == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}

func (s *server) supervise(ctx context.Context) {
	log := s.opts.Logger.With("mcp", s.cfg.Name)
	backoff := s.opts.MinBackoff
	first := true
	for ctx.Err() == nil {
		started := time.Now()
		c, err := connect(ctx, s.cfg, s.opts.HTTPClient)
		if err == nil {
			s.mu.Lock()
			s.session, s.tools = c.cs, c.tools
			s.mu.Unlock()
			log.Info("mcp server connected", "tools", len(c.tools))
		} else if ctx.Err() == nil {
			log.Warn("mcp server unreachable; its tools are absent until it is back", "err", err, "retry_in", backoff)
		}
		if first {
			close(s.ready)
			first = false
		}
		if err == nil {
			done := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
					c.cs.Close()
				case <-done:
				}
			}()
			// Wait returns once the transport is closed: a stdio server's process has
			// been waited for, so its stderr is all in.
			werr := c.cs.Wait()
			close(done)
			c.end()
			s.mu.Lock()
			s.session, s.tools = nil, nil
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			if werr == nil {
				werr = errors.New("it closed the connection")
			}
			log.Warn("mcp server went away; restarting it", "err", s.cfg.redact(c.stderr.explain(werr)), "retry_in", backoff)
			if time.Since(started) > 2*s.opts.MaxBackoff {
				backoff = s.opts.MinBackoff // it ran well for a while: start over
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

// conn is one session with a server.
type conn struct {
	cs    *mcp.ClientSession
	tools []*mcp.Tool
	// end kills what is left of a stdio server's processes once the session is over.
	end func()
	// stderr is the end of what a stdio server wrote to stderr (nil for HTTP).
	stderr *stderrTail
}

// connect opens one session and lists its tools. On an error it has killed what it started,
// and the error quotes the end of a stdio server's stderr.
func connect(ctx context.Context, c ServerConfig, hc *http.Client) (_ conn, err error) {
	defer func() { err = c.redact(err) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway", Version: "1"}, nil)
	var transport mcp.Transport
	kill := func() {}
	var stderr *stderrTail
	if len(c.Command) > 0 {
		cmd := exec.Command(c.Command[0], c.Command[1:]...)
		// The transport ends only the program it started: what a wrapper (npx, a shell
		// script) started would outlive each failed attempt and each restart.
		childproc.NewGroup(cmd)
		kill = func() {
			if cmd.Process != nil {
				childproc.KillGroup(cmd.Process.Pid)
			}
		}
		defer func() {
			if err != nil {
				kill()
			}
		}()
		// Like a hook program, a server gets a minimal environment plus what its env: gives
		// it, never the gateway's tokens and API keys unless the admin passes them there.
		cmd.Env = childproc.BaseEnv()
		stderr = &stderrTail{Tail: childproc.Tail{Max: maxStderr}}
		for k, v := range c.Env {
			cmd.Env = append(cmd.Env, k+"="+v.Reveal())
			stderr.secrets = append(stderr.secrets, v.Reveal())
		}
		// A server says why it failed on stderr; without it the admin sees only the
		// protocol error ("invalid character 'g' looking for beginning of value").
		cmd.Stderr = stderr
		// Whatever the server started may hold stderr open after it exits: stop waiting
		// for it soon, so closing the session never hangs on it.
		cmd.WaitDelay = time.Second
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		if hc == nil {
			hc = &http.Client{}
		}
		if len(c.Headers) > 0 {
			base := hc.Transport
			if base == nil {
				base = http.DefaultTransport
			}
			cp := *hc
			cp.Transport = headerTransport{base: base, headers: c.Headers}
			hc = &cp
		}
		transport = &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, MaxRetries: -1}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// A failed Connect and Close have waited for a stdio server's process (and so for its
	// stderr) before they return.
	cs, err := client.Connect(cctx, transport, nil)
	if err != nil {
		return conn{}, stderr.explain(err)
	}
	var tools []*mcp.Tool
	var cursor string
	for range 100 {
		res, err := cs.ListTools(cctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			cs.Close()
			return conn{}, stderr.explain(fmt.Errorf("listing its tools: %w", err))
		}
		tools = append(tools, res.Tools...)
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	return conn{cs: cs, tools: tools, end: kill, stderr: stderr}, nil
}

// maxStderr bounds how much of a stdio server's stderr is kept: its last few KB, which say
// why it failed; a server that logs a lot to stderr while it runs costs no more.
const maxStderr = 4 << 10

// stderrTail keeps the end of what a stdio server writes to stderr, and the values of its
// env:, which an error never quotes.
type stderrTail struct {
	childproc.Tail
	secrets []string
}

// explain returns err with the end of the server's stderr, on one line, appended
// ("...; stderr: ..."); err as it is when the server wrote nothing (or t is nil: an HTTP
// server).
func (t *stderrTail) explain(err error) error {
	if t == nil || err == nil {
		return err
	}
	text, cut := strings.ToValidUTF8(t.String(), ""), t.Cut()
	for _, v := range t.secrets {
		if len(v) < 4 {
			continue // shorter values ("1", "on") are settings, and would blank out words
		}
		text = strings.ReplaceAll(text, v, "<redacted>")
		// The cut may have kept only the end of one.
		for k := len(v) - 1; cut && k >= 4; k-- {
			if strings.HasPrefix(text, v[len(v)-k:]) {
				text = "<redacted>" + text[k:]
				break
			}
		}
	}
	var lines []string
	for l := range strings.Lines(text) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return err
	}
	quoted := strings.Join(lines, " | ")
	if cut {
		quoted = "..." + quoted
	}
	return fmt.Errorf("%w; stderr: %s", err, quoted)
}

// redact hides from err what the entry holds as secrets (the url's password and query
// values, the headers' values): Go's HTTP errors quote the whole URL, and a token in
// ?token= would reach the log, check's output and the model told of a failed call.
func (c ServerConfig) redact(err error) error {
	secrets := harness.URLSecrets(c.URL)
	for _, v := range c.Headers {
		secrets = append(secrets, v.Reveal())
	}
	return harness.RedactError(err, secrets...)
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]secret.Secret
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v.Reveal())
	}
	return h.base.RoundTrip(r)
}

// Check connects to each server once, lists its tools and disconnects (for `gateway
// check`): per server, the tool names or the error.
func Check(ctx context.Context, servers []ServerConfig) (tools map[string][]string, errs []error) {
	tools = map[string][]string{}
	for _, c := range servers {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		cn, err := connect(ctx, c, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("mcp %s: unreachable: %w", c.Name, err))
			continue
		}
		cn.cs.Close()
		cn.end()
		var names []string
		for _, t := range cn.tools {
			names = append(names, t.Name)
		}
		sort.Strings(names)
		tools[c.Name] = names
	}
	return tools, errs
}

// Tools returns the tools of the named servers that are connected now, as harness tools
// named "<server>__<tool>" (all servers when names is nil).
func (m *Manager) Tools(names []string) []harness.Tool {
	if m == nil {
		return nil
	}
	var out []harness.Tool
	for _, s := range m.servers {
		if names != nil && !slices.Contains(names, s.cfg.Name) {
			continue
		}
		s.mu.Lock()
		for _, t := range s.tools {
			out = append(out, &tool{s: s, name: t.Name, def: toolDef(s.cfg.Name, t)})
		}
		s.mu.Unlock()
	}
	return out
}

func toolDef(server string, t *mcp.Tool) llm.ToolDef {
	params, err := json.Marshal(t.InputSchema)
	if err != nil || string(params) == "null" {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return llm.ToolDef{Name: modelName(server, t.Name), Description: t.Description, Parameters: params}
}

// maxToolName is the longest tool name OpenAI and Anthropic accept.
const maxToolName = 64

// modelName is the name the model knows a server's tool by: "<server>__<tool>", made to
// fit ^[a-zA-Z0-9_-]{1,64}$. The providers refuse a whole request for one name outside it,
// so a single odd tool (MCP allows "." and "/" and 128 characters) would break every turn:
// other characters become "_", and a name too long is cut and ends with a hash of the
// whole name, so that two long names stay apart.
func modelName(server, tool string) string {
	name := server + "__" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, tool)
	if len(name) <= maxToolName {
		return name
	}
	sum := sha256.Sum256([]byte(server + "__" + tool))
	return name[:maxToolName-9] + "_" + hex.EncodeToString(sum[:4])
}

type tool struct {
	s    *server
	name string
	def  llm.ToolDef
}

func (t *tool) Def() llm.ToolDef { return t.def }

func (t *tool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	t.s.mu.Lock()
	cs := t.s.session
	t.s.mu.Unlock()
	if cs == nil {
		t.s.opts.Logger.Warn("mcp tool call refused: its server is not connected", "server", t.s.cfg.Name, "tool", t.name)
		return "", fmt.Errorf("the MCP server %s is not available right now", t.s.cfg.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.opts.CallTimeout)
	defer cancel()
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.name, Arguments: args})
	if err != nil {
		err = t.s.cfg.redact(err)
		// The model is told too, but the admin reads the log: a server that fails calls
		// while it stays connected shows nowhere else.
		t.s.opts.Logger.Warn("mcp tool call failed", "server", t.s.cfg.Name, "tool", t.name, "err", err)
		return "", fmt.Errorf("MCP server %s: %w", t.s.cfg.Name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
		case *mcp.ImageContent:
			fmt.Fprintf(&b, "[image %s]", c.MIMEType)
		case *mcp.AudioContent:
			fmt.Fprintf(&b, "[audio %s]", c.MIMEType)
		default:
			data, _ := json.Marshal(c)
			b.Write(data)
		}
	}
	if b.Len() == 0 && res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		b.Write(data)
	}
	if res.IsError {
		return "", &harness.ToolFailed{Content: b.String()}
	}
	return b.String(), nil
}
