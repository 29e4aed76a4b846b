package gatewaycli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"gateway/cluster"
	"gateway/profiles"
)

// checkConfig loads and validates the config and builds every part the way `run` does, up to
// connecting; it prints the effective config with secrets masked and each problem on its own
// line. Any problem → exit status 1.
func checkConfig(ctx context.Context, path string, out io.Writer, getenv func(string) string) error {
	cfg, err := loadChecked(path, getenv)
	if err == nil {
		// Build everything run builds, logging nowhere, then let it go.
		var a *app
		if a, err = buildApp(cfg, path, slog.New(slog.DiscardHandler), getenv, true); err == nil {
			// Every hook that would not load, each on its own line: run skips them silently
			// for the user, so check is where the admin learns of all of them.
			var herrs []error
			for _, e := range a.loadErrs {
				herrs = append(herrs, fmt.Errorf("hook %s: %w", e.Path, e.Err))
			}
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
	source := path
	if source == "" {
		source = "(no config file: built-in defaults)"
	}
	fmt.Fprintf(out, "# config: %s\n", source)
	if b, merr := yaml.Marshal(configMap(cfg, true)); merr == nil {
		out.Write(b)
	}
	if err != nil {
		fmt.Fprintf(out, "\nproblems:\n%s\n", indent(err.Error()))
		return exitCode(1)
	}
	fmt.Fprintln(out, "\nconfig OK")
	return nil
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
		RunE: func(*cobra.Command, []string) error {
			cfg, err := loadChecked(path(), getenv)
			if err != nil {
				fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			a, err := buildApp(cfg, path(), slog.New(slog.DiscardHandler), getenv, true)
			if err != nil {
				fmt.Fprintf(out, "cannot build the gateway:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			defer a.gw.Stop(context.Background())
			list := a.gw.Runtime().Bus.Handlers()
			sort.SliceStable(list, func(i, j int) bool { return list[i].Source < list[j].Source })
			if len(list) == 0 {
				// An empty table reads like a failure; say what was looked at instead.
				fmt.Fprintf(out, "no hooks loaded (looked in hooks.dirs %s and each profile's hooks/ folder under %s; speech hooks are off)\n",
					strings.Join(a.cfg.Hooks.Dirs, ", "), a.cfg.Profiles.Dir)
			} else {
				fmt.Fprintf(out, "%-50s %-22s %s\n", "SOURCE", "EVENT", "PROFILE")
				for _, h := range list {
					fmt.Fprintf(out, "%-50s %-22s %s\n", h.Source, h.Event, h.Profile)
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
			cfg, err := loadConfig(path(), getenv)
			if err != nil {
				fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			set, err := profiles.LoadWith(cfg.Profiles, cfg.Bindings, profileOptions(cfg, getenv))
			if err != nil {
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

// newReloadCmd asks a running gateway to reload through its admin endpoint, with admin.token
// when one is set.
func newReloadCmd(ctx context.Context, path func() string, out io.Writer, getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Ask the running gateway to re-read profiles and hook directories",
		RunE: func(*cobra.Command, []string) error {
			cfg, err := loadConfig(path(), getenv)
			if err != nil {
				fmt.Fprintf(out, "the configuration has problems:\n%s\n", indent(err.Error()))
				return exitCode(1)
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, adminURL(cfg.HTTP.Listen)+"/admin/reload", nil)
			if err != nil {
				return err
			}
			if cfg.Admin.Token.IsSet() {
				req.Header.Set("Authorization", "Bearer "+cfg.Admin.Token.Reveal())
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				fmt.Fprintf(out, "cannot reach the gateway at %s: %v\n", cfg.HTTP.Listen, err)
				return exitCode(1)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			out.Write(body)
			if resp.StatusCode != http.StatusOK {
				return exitCode(1)
			}
			return nil
		},
	}
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
