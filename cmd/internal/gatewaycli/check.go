package gatewaycli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"gateway/cluster"
	"gateway/gateway"
	"gateway/harness/mcptools"
	"gateway/profiles"
)

// checkConfig loads and validates the config and builds every part the way `run` does, up to
// connecting; it prints the effective config with secrets masked, each warning (what run
// starts with but will fail at) and each problem on its own line. Any problem → exit status 1. It starts no program and calls no service (the model,
// speech and MCP servers are checked as written), but for the cluster's engines; connect
// also reaches each MCP server (a stdio one is started and stopped) and lists its tools.
func checkConfig(ctx context.Context, path string, out io.Writer, getenv func(string) string, names []string, connect bool) error {
	cfg, err := loadStrict(path, getenv, names)
	source := path
	if source == "" {
		source = "(no config file: built-in defaults)"
	}
	if unread := (*unreadError)(nil); errors.As(err, &unread) {
		// The file never reached the config: printing one here would show the built-in
		// defaults as if they had been read from it and checked.
		fmt.Fprintf(out, "# config: %s (not read: nothing was checked)\n\nproblems:\n%s\n", source, indent(err.Error()))
		return exitCode(1)
	}
	var mcpOut string
	var warnings []string
	if err == nil {
		// Build everything run builds, logging nowhere, then let it go.
		var a *app
		if a, err = buildApp(cfg, path, slog.New(slog.DiscardHandler), getenv, nil, true); err == nil {
			// Every hook that would not load, each on its own line: run skips them silently
			// for the user, so check is where the admin learns of all of them.
			var herrs []error
			for _, e := range a.loadErrs {
				herrs = append(herrs, fmt.Errorf("hook %s: %w", e.Path, e.Err))
			}
			if rt := a.gw.Runtime(); rt != nil {
				warnings = configWarnings(cfg, path, rt.Profiles)
			}
			var merrs []error
			mcpOut, merrs = checkMCP(ctx, cfg, a, connect)
			herrs = append(herrs, merrs...)
			if cfg.Cluster.Enabled() {
				// check connects to nothing else, but a cluster's engines it must reach.
				pgCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				herrs = append(herrs, cluster.Check(pgCtx, cfg.Cluster.PostgresURL.Reveal()))
				cancel()
				if cfg.Cluster.NATSURL.IsSet() {
					natsCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
					herrs = append(herrs, cluster.CheckNATS(natsCtx, cfg.Cluster.NATSURL.Reveal()))
					cancel()
				}
			}
			err = errors.Join(herrs...)
			stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = a.gw.Stop(stopCtx)
			cancel()
		}
	}
	fmt.Fprintf(out, "# config: %s\n", source)
	if b, merr := showConfig(cfg); merr == nil {
		out.Write(b)
	}
	fmt.Fprint(out, mcpOut)
	if len(warnings) > 0 {
		// Not problems: run starts with them, and they are what its first messages meet.
		fmt.Fprintf(out, "\nwarnings:\n%s\n", indent(strings.Join(warnings, "\n")))
	}
	if err != nil {
		fmt.Fprintf(out, "\nproblems:\n%s\n", indent(err.Error()))
		return exitCode(1)
	}
	fmt.Fprintln(out, "\nconfig OK")
	return nil
}

// checkMCP checks every MCP server of the config and of the profiles as written: a stdio
// command must be a program that can be run, a url well-formed. Nothing is started: an
// MCP command is an admin's program, and check must not run it as a side effect. With
// connect, each server is reached (a stdio one started and stopped again) and its tools
// listed: an unreachable server is then a problem here, a warning at run time.
func checkMCP(ctx context.Context, cfg Config, a *app, connect bool) (string, []error) {
	sets := []struct {
		where   string
		servers []mcptools.ServerConfig
	}{{"mcp", cfg.MCP}}
	if rt := a.gw.Runtime(); rt != nil {
		for _, name := range rt.Profiles.Names() {
			if p := rt.Profiles.Get(name); len(p.MCP) > 0 {
				sets = append(sets, struct {
					where   string
					servers []mcptools.ServerConfig
				}{"profile " + name + ": mcp", p.MCP})
			}
		}
	}
	var b strings.Builder
	var errs []error
	for _, set := range sets {
		if len(set.servers) == 0 {
			continue
		}
		// The servers' errors name them ("mcp files: ..."); a profile's say whose they are.
		named := func(err error) error {
			if set.where == "mcp" {
				return err
			}
			return fmt.Errorf("%s: %w", strings.TrimSuffix(set.where, ": mcp"), err)
		}
		if !connect {
			for _, srv := range set.servers {
				if err := srv.CheckOffline(); err != nil {
					errs = append(errs, named(err))
					continue
				}
				what := maskURL(srv.URL) + ", not contacted"
				if len(srv.Command) > 0 {
					what = "command " + srv.Command[0] + ", not started"
				}
				fmt.Fprintf(&b, "%s %s: %s (check --connect reaches it and lists its tools)\n", set.where, srv.Name, what)
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tools, cerrs := mcptools.Check(cctx, set.servers)
		cancel()
		for _, e := range cerrs {
			errs = append(errs, named(e))
		}
		for _, srv := range set.servers {
			if names, ok := tools[srv.Name]; ok {
				fmt.Fprintf(&b, "%s %s: %d tools: %s\n", set.where, srv.Name, len(names), strings.Join(names, ", "))
			}
		}
	}
	if b.Len() > 0 {
		return "\n" + b.String(), errs
	}
	return "", errs
}

// showConfig is the config as YAML with secrets masked and with the values run uses: a
// key left at 0 or empty that takes a default later shows that default, marked "# default".
func showConfig(cfg Config) ([]byte, error) {
	raw := flatten(configMap(cfg, true), "")
	var doc yaml.Node
	if err := doc.Encode(configMap(cfg.withDefaults(), true)); err != nil {
		return nil, err
	}
	markDefaults(&doc, "", raw)
	return yaml.Marshal(&doc)
}

// markDefaults comments each value under n (at the key path prefix) that differs from the
// loaded one in raw: a default filled in after loading.
func markDefaults(n *yaml.Node, prefix string, raw map[string]any) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		path := key.Value
		if prefix != "" {
			path = prefix + "." + path
		}
		if val.Kind == yaml.MappingNode {
			markDefaults(val, path, raw)
			continue
		}
		var shown any
		if was, ok := raw[path]; ok && val.Decode(&shown) == nil && fmt.Sprint(shown) != fmt.Sprint(was) {
			val.LineComment = "default"
		}
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = "  - " + l
	}
	return strings.Join(lines, "\n")
}

func newHooksCmd(path func() string, out io.Writer, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{Use: "hooks", Short: "Inspect hooks"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List every hook: its source, events, and load errors",
		Long: "List every hook that loaded (its source, events, commands and tools) and every one that " +
			"did not, with why. Exit status 1 when any hook failed to load. Only the hooks are built: " +
			"the ${VAR}s of other sections (platform tokens, the model's key) need not be set.",
		RunE: func(*cobra.Command, []string) error {
			cfg, err := loadForHooks(path(), getenv)
			if err != nil {
				fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			// Only what hooks are: the builtin speech hooks, hooks.dirs and the profiles'
			// hooks. The channels and the model are not built, so their tokens and keys
			// need not be set in the admin's shell.
			a, cfg := newApp(cfg, path(), slog.New(slog.DiscardHandler), getenv, nil)
			if err := errors.Join(a.buildSpeech(cfg)...); err != nil {
				fmt.Fprintf(out, "cannot build the hooks:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			rt, report, err := a.buildRuntime(cfg)
			if err != nil {
				fmt.Fprintf(out, "cannot build the hooks:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			defer rt.Close()
			a.hooks, a.loadErrs = report.hooks, report.errs
			list := rt.Bus.Handlers()
			sort.SliceStable(list, func(i, j int) bool { return list[i].Source < list[j].Source })
			loaded := 0 // hooks that run: a hook may serve only commands or tools, with no event
			for _, h := range a.hooks {
				if h.Enabled {
					loaded++
				}
			}
			if len(list) == 0 && loaded > 0 {
				fmt.Fprintf(out, "no event handlers: the %d hook(s) loaded serve only commands or tools (below)\n", loaded)
			} else if len(list) == 0 {
				// An empty table reads like a failure; say what was looked at instead.
				fmt.Fprintf(out, "no hooks loaded (looked in hooks.dirs %s and each profile's hooks/ folder under %s; speech hooks are off)\n",
					strings.Join(a.cfg.Hooks.Dirs, ", "), a.cfg.Profiles.Dir)
			} else {
				fmt.Fprintf(out, "%-50s %-22s %s\n", "SOURCE", "EVENT", "PROFILE")
				for _, h := range list {
					fmt.Fprintf(out, "%-50s %-22s %s\n", h.Source, h.Event, h.Profile)
				}
			}
			if reg := rt.Commands; reg != nil {
				var decl []string
				for _, c := range reg.Commands("") {
					if c.Run != nil {
						decl = append(decl, fmt.Sprintf("  %-48s command /%s", c.Source, c.Name))
					}
				}
				for _, h := range a.hooks {
					if !h.Enabled {
						continue
					}
					for _, c := range h.Commands {
						if line := fmt.Sprintf("  %-48s command /%s", h.Source, c.Name); !slices.Contains(decl, line) {
							decl = append(decl, line)
						}
					}
					for _, t := range h.Tools {
						decl = append(decl, fmt.Sprintf("  %-48s tool %s", h.Source, t.Name))
					}
				}
				if len(decl) > 0 {
					fmt.Fprintf(out, "\ncommands and tools:\n%s\n", strings.Join(decl, "\n"))
				}
			}
			var disabled []string
			for _, h := range a.hooks {
				if !h.Enabled {
					disabled = append(disabled, fmt.Sprintf("  %-48s events: %s", h.Source, strings.Join(h.Events, ", ")))
				}
			}
			if len(disabled) > 0 {
				fmt.Fprintf(out, "\ndisabled (enabled: false):\n%s\n", strings.Join(disabled, "\n"))
			}
			if len(a.loadErrs) > 0 {
				fmt.Fprintln(out, "\nnot loaded:")
				for _, e := range a.loadErrs {
					fmt.Fprintf(out, "  %s: %v\n", e.Path, e.Err)
				}
				// As check does: a script must be able to tell that a hook is missing.
				return exitCode(1)
			}
			return nil
		},
	})
	return cmd
}

func newProfilesCmd(path func() string, out io.Writer, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{Use: "profiles", Short: "Inspect profiles"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List profiles and the bindings that reach them",
		RunE: func(*cobra.Command, []string) error {
			cfg, err := loadForProfiles(path(), getenv)
			if err != nil {
				fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			set, err := profiles.LoadWith(cfg.Profiles, cfg.Bindings, profileOptions(cfg, getenv))
			if err != nil {
				err = locateProfileErrors(path(), getenv, err)
				fmt.Fprintf(out, "the profiles have problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			for _, p := range set.List() {
				def := ""
				if p.Default {
					def = " (default)"
				}
				dir := p.Dir
				if dir == "" {
					dir = "built-in"
				}
				fmt.Fprintf(out, "%s%s  [%s]\n", p.Name, def, dir)
				if p.Description != "" {
					fmt.Fprintf(out, "  %s\n", p.Description)
				}
				if p.HooksDir != "" {
					fmt.Fprintf(out, "  hooks: %s\n", p.HooksDir)
				}
				for _, b := range p.Bindings {
					fmt.Fprintf(out, "  bound: channel=%q chat=%q thread=%q user=%q\n", b.Match.Channel, b.Match.Chat, b.Match.Thread, b.Match.User)
				}
			}
			return nil
		},
	})
	return cmd
}

// newReloadCmd asks a running gateway to reload through its admin API, with admin.token
// when one is set.
func newReloadCmd(ctx context.Context, path func() string, out io.Writer, getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Ask the running gateway to re-read profiles, bindings and hook directories",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(ctx, apiTarget(cmd, path, getenv), out, getenv, "/reload", nil)
		},
	}
}

// apiTarget tells where send and reload find the admin API: the config file whose
// http.listen and admin.token say it, or nil for GATEWAY_API_URL and GATEWAY_API_TOKEN. The
// gateway gives those to a hook with api: true, whose program runs where no config file is
// and whose gateway may listen elsewhere than the default: when GATEWAY_API_URL is set they
// are used, unless --config names a file.
func apiTarget(cmd *cobra.Command, path func() string, getenv func(string) string) (cfgPath *string) {
	if cmd.Flags().Changed("config") || getenv(apiURLVar) == "" {
		p := path()
		return &p
	}
	return nil
}

// The variables a hook with api: true is given for the admin API.
const (
	apiURLVar   = "GATEWAY_API_URL"
	apiTokenVar = "GATEWAY_API_TOKEN"
)

// newSendCmd delivers a message to a chat through the running gateway, without the model.
func newSendCmd(ctx context.Context, path func() string, out io.Writer, getenv func(string) string) *cobra.Command {
	var channel, chat, thread string
	cmd := &cobra.Command{
		Use:   "send --channel NAME --chat ID TEXT...",
		Short: "Send a message to a chat through the running gateway (no model involved)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(ctx, apiTarget(cmd, path, getenv), out, getenv, "/send", map[string]any{
				"channel": channel, "chat_id": chat, "thread_id": thread, "text": strings.Join(args, " ")})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "", "the channel: telegram, discord, slack or web")
	cmd.Flags().StringVar(&chat, "chat", "", "the chat id on that channel")
	cmd.Flags().StringVar(&thread, "thread", "", "the thread (Slack thread, Telegram topic, Discord thread), if any")
	_ = cmd.MarkFlagRequired("channel")
	_ = cmd.MarkFlagRequired("chat")
	return cmd
}

// callAPI POSTs body (JSON; nil: none) to the running gateway's admin API at path (under
// /api/v1) and prints the answer; a non-2xx answer is exit status 1. cfgPath is the config
// file that says where the API is (nil: GATEWAY_API_URL and GATEWAY_API_TOKEN, see apiTarget).
func callAPI(ctx context.Context, cfgPath *string, out io.Writer, getenv func(string) string, path string, body any) error {
	var base, token, where string
	if cfgPath == nil {
		base, token = strings.TrimSuffix(getenv(apiURLVar), "/"), getenv(apiTokenVar)
		if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(out, "%s is not an http:// URL of the admin API (like http://127.0.0.1:8080/api/v1)\n", apiURLVar)
			return exitCode(1)
		}
		where = base + " (" + apiURLVar + ")"
	} else {
		cfg, err := loadClient(*cfgPath, getenv)
		if err != nil {
			fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
			return exitCode(1)
		}
		base, token, where = adminURL(cfg.HTTP.Listen)+"/api/v1", cfg.Admin.Token.Reveal(), cfg.HTTP.Listen
	}
	// Longer than the gateway's own bound on a send: a send waiting out a platform's rate
	// limit (Telegram asks for up to a minute and more) is answered, not cut off by the
	// client going away, which would also cancel its delivery.
	wait := gateway.SendTimeout + 30*time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(out, "the gateway at %s did not answer within %s\n", where, wait)
		return exitCode(1)
	}
	if err != nil {
		fmt.Fprintf(out, "cannot reach the gateway at %s: %v\n", where, err)
		return exitCode(1)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		// The API's refusal in plain words, not its JSON: {"error": ..., "status": ...}.
		var e struct{ Error, Status string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			fmt.Fprintf(out, "the gateway refused (HTTP %d): %s\n", resp.StatusCode, e.Error)
			if e.Status != "" {
				fmt.Fprintf(out, "(%s)\n", e.Status)
			}
		} else {
			fmt.Fprintf(out, "the gateway answered HTTP %d: %s\n", resp.StatusCode, bytes.TrimSpace(data))
		}
		return exitCode(1)
	}
	out.Write(data)
	return nil
}

// adminURL is where `gateway reload` reaches the gateway listening on listen. A wildcard
// listen address (":8080", "0.0.0.0:8080", "[::]:8080") is reached through loopback, since
// the admin endpoint refuses any other Host.
func adminURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
