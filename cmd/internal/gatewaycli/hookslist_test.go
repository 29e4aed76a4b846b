package gatewaycli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// `gateway hooks list` said "exit 0" beside hooks that did not load, so an admin's script
// could not tell; and it refused to list anything until every ${VAR} of the config was set,
// the platform tokens and the model's key included, which it does not use. It now lists
// what loaded and what did not, exits 1 when something did not (as check does), and asks
// only for the variables of what it reads.
func TestHooksListExitsNonZeroOnLoadFailuresAndNeedsNoOtherSecrets(t *testing.T) {
	root := t.TempDir()
	hooksDir := filepath.Join(root, "hooks")
	writeHook(t, hooksDir, "10-good", receiveYAML, "cat >/dev/null\n")
	writeHook(t, hooksDir, "20-typo", "events: [message:recieve]\ncommand: [./run.sh]\n", "cat >/dev/null\n")
	path := filepath.Join(root, "gateway.yaml")
	writeFile(t, path, `state_dir: `+filepath.Join(root, "data")+`
llm: {provider: openai, api_key: "${HL_MODEL_KEY}"}
hooks: {dirs: [`+hooksDir+`]}
profiles: {dir: `+filepath.Join(root, "profiles")+`}
channels:
  telegram: {enabled: true, token: "${HL_TELEGRAM_TOKEN}"}
  slack: {enabled: true, bot_token: "${HL_SLACK_BOT}", app_token: "${HL_SLACK_APP}"}
`)
	ctx := context.Background()

	code, out := cli(t, ctx, nil, "hooks", "list", "--config", path)
	if code != 1 {
		t.Errorf("hooks list with a hook that did not load: exit %d; want 1:\n%s", code, out)
	}
	if !hasLine(out, "dir:"+hooksDir+"/10-good", "message:receive") {
		t.Errorf("the hook that loaded is not listed:\n%s", out)
	}
	if _, notLoaded, _ := strings.Cut(out, "not loaded:"); !strings.Contains(notLoaded, filepath.Join(hooksDir, "20-typo")+": HOOK.yaml:1: events[0]: unknown event") {
		t.Errorf("the hook that did not load is not under 'not loaded' with why:\n%s", out)
	}
	if strings.Contains(out, "is not set") || strings.Contains(out, "problems") {
		t.Errorf("hooks list asked for variables it does not use:\n%s", out)
	}

	writeHook(t, hooksDir, "20-typo", receiveYAML, "cat >/dev/null\n") // fixed
	if code, out := cli(t, ctx, nil, "hooks", "list", "--config", path); code != 0 || strings.Contains(out, "not loaded") {
		t.Errorf("hooks list with every hook loaded: exit %d; want 0:\n%s", code, out)
	}

	// The variables of what it does read are still its to report.
	writeFile(t, path, "state_dir: "+filepath.Join(root, "data")+"\nhooks: {dirs: [\"${HL_HOOKS_DIR}\"]}\n")
	if code, out := cli(t, ctx, nil, "hooks", "list", "--config", path); code != 1 || !strings.Contains(out, "hooks.dirs[0]: environment variable HL_HOOKS_DIR is not set") {
		t.Errorf("hooks list with hooks.dirs's variable unset: exit %d; want 1 naming it:\n%s", code, out)
	}
}
