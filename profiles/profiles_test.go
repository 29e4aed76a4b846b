package profiles

import (
	"path/filepath"
	"reflect"
	"testing"
)

func loadResolveSet(t *testing.T, bindings []Binding) *Set {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for _, n := range []string{"chan", "chat", "user", "thread", "first", "second", "catchall"} {
		files[n+"/SYSTEM.md"] = "I am " + n
	}
	writeTree(t, dir, files)
	set, err := Load(Config{Dir: dir, Default: "fallback"}, bindings)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestResolveMostSpecificWins(t *testing.T) {
	// Listed least specific last and first, so order cannot explain the outcome.
	set := loadResolveSet(t, []Binding{
		{Profile: "chan", Match: Match{Channel: "telegram"}},
		{Profile: "user", Match: Match{User: "42"}},
		{Profile: "chat", Match: Match{Channel: "telegram", Chat: "100"}},
		{Profile: "thread", Match: Match{Channel: "slack", Chat: "C1", Thread: "T9"}},
	})
	for _, tc := range []struct {
		channel, chat, thread, user string
		want                        string
	}{
		{"telegram", "100", "", "42", "user"},   // user beats chat and channel
		{"telegram", "100", "", "7", "chat"},    // chat beats channel
		{"telegram", "555", "", "7", "chan"},    // channel only
		{"discord", "100", "", "42", "user"},    // user binding has no channel: any channel
		{"slack", "C1", "T9", "7", "thread"},    // thread beats chat
		{"slack", "C1", "T9", "42", "user"},     // user beats thread
		{"slack", "C1", "", "7", "fallback"},    // thread binding needs the thread
		{"discord", "100", "", "7", "fallback"}, // unbound: the default
	} {
		got := set.Resolve(tc.channel, tc.chat, tc.thread, tc.user)
		if got == nil || got.Name != tc.want {
			t.Errorf("Resolve(%q, %q, %q, %q) = %v, want %q", tc.channel, tc.chat, tc.thread, tc.user, got, tc.want)
		}
	}
	if d := set.Default(); d.Name != "fallback" || d.System != DefaultSystemPrompt {
		t.Errorf("default = %+v", *d)
	}
}

// Weights are powers of two, so equal scores mean the same set of fields.
func TestResolveFirstOfEqualWins(t *testing.T) {
	m := Match{Channel: "web", Chat: "c"}
	set := loadResolveSet(t, []Binding{
		{Profile: "first", Match: m},
		{Profile: "second", Match: m},
	})
	if got := set.Resolve("web", "c", "", "u"); got.Name != "first" {
		t.Errorf("equal bindings: got %q, want the first listed", got.Name)
	}

	set = loadResolveSet(t, []Binding{
		{Profile: "second", Match: m},
		{Profile: "first", Match: m},
	})
	if got := set.Resolve("web", "c", "", "u"); got.Name != "second" {
		t.Errorf("equal bindings, reversed: got %q, want the first listed", got.Name)
	}
}

func TestResolveCatchAllBeatsDefault(t *testing.T) {
	set := loadResolveSet(t, []Binding{
		{Profile: "catchall"},
		{Profile: "chan", Match: Match{Channel: "discord"}},
	})
	if got := set.Resolve("web", "1", "", "2"); got.Name != "catchall" {
		t.Errorf("empty match: got %q, want catchall", got.Name)
	}
	if got := set.Resolve("discord", "1", "", "2"); got.Name != "chan" {
		t.Errorf("channel binding vs empty match: got %q, want chan", got.Name)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"support/profile.yaml": "description: Customer support\n",
		"support/hooks/":       "",
		"coder/SYSTEM.md":      "Go.",
	})
	bindings := []Binding{
		{Profile: "support", Match: Match{Channel: "telegram", Chat: "1"}},
		{Profile: "coder", Match: Match{User: "9"}},
		{Profile: "support", Match: Match{Channel: "slack"}},
	}
	set, err := Load(Config{Dir: dir, Default: "assistant"}, bindings)
	if err != nil {
		t.Fatal(err)
	}
	want := []ProfileInfo{
		{Name: "assistant", Default: true},
		{Name: "coder", Dir: filepath.Join(dir, "coder"), Bindings: []Binding{bindings[1]}},
		{
			Name: "support", Dir: filepath.Join(dir, "support"), Description: "Customer support",
			Bindings: []Binding{bindings[0], bindings[2]}, HooksDir: filepath.Join(dir, "support", "hooks"),
		},
	}
	if got := set.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("List():\n got %+v\nwant %+v", got, want)
	}
	if got := set.Bindings(); !reflect.DeepEqual(got, bindings) {
		t.Errorf("Bindings() = %+v", got)
	}
	// The set keeps its own copy: changing the caller's slice changes nothing.
	bindings[0].Profile = "coder"
	if got := set.Resolve("telegram", "1", "", "x"); got.Name != "support" {
		t.Errorf("set shares the caller's bindings: got %q", got.Name)
	}
}

func TestMatchString(t *testing.T) {
	if got := (Match{Channel: "telegram", Chat: "1", User: "2"}).String(); got != "channel=telegram chat=1 user=2" {
		t.Errorf("got %q", got)
	}
	if got := (Match{}).String(); got != "any chat" {
		t.Errorf("got %q", got)
	}
}

func TestBuiltin(t *testing.T) {
	set := Builtin("")
	if d := set.Default(); d.Name != DefaultName || d.System != DefaultSystemPrompt || d.QueueMode != "" {
		t.Errorf("Builtin default: %+v", *d)
	}
	if p := Builtin("x").Resolve("web", "1", "", "u"); p.Name != "x" {
		t.Errorf("Builtin(x) resolves to %q", p.Name)
	}
}
