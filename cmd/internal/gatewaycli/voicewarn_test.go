package gatewaycli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gateway/channels/channeltest"
)

// A profile that asks for spoken answers (tts.mode: always) while tts.mode in gateway.yaml
// is off was silently answered in text only: the text-to-speech hook is not loaded. check
// now warns, naming the profile, its file and what to set (exit 0); so do run's log and a
// reload that brings such a profile in. With tts on in gateway.yaml there is no warning.
func TestProfileAskingForVoiceWithTTSOffIsWarnedOf(t *testing.T) {
	const ttsOff = "tts: {mode: \"off\"}\n"
	const want = "profile talk: tts.mode is always in "
	const why = "but tts.mode is off in gateway.yaml, so no answer is spoken"
	t.Chdir(t.TempDir())
	writeProfiles(t, "data", map[string]string{"talk": "tts: {mode: always}\n"})
	base := "state_dir: ./data\nprofiles: {dir: ./data/profiles}\n"
	if err := os.WriteFile("gateway.yaml", []byte(base+ttsOff), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, context.Background(), nil, "check", "--config", "gateway.yaml")
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, filepath.Join("data", "profiles", "talk", "profile.yaml")+", but") || !strings.Contains(out, why) {
		t.Errorf("check: exit %d; want 0 and a warning naming profile talk and its file:\n%s", code, out)
	}
	if err := os.WriteFile("gateway.yaml", []byte(base+"tts: {mode: inbound, provider: command, command: [espeak-ng, -w, \"{output}\", -f, \"{text_file}\"]}\n"), 0o600); err == nil {
		if code, out := cli(t, context.Background(), nil, "check", "--config", "gateway.yaml"); strings.Contains(out, "tts.mode is always") {
			t.Errorf("check with tts on: exit %d; want no voice warning:\n%s", code, out)
		}
	}

	// run warns at the start; a reload that brings another such profile warns of it too.
	addr := freePort(t)
	if err := os.WriteFile("gateway.yaml", []byte(base+ttsOff+"http: {listen: \""+addr+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &channeltest.LogBuffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, nil, []string{"run", "--config", "gateway.yaml"}, log, log, nil) }()
	waitFor(t, "the gateway listens", func() bool { return strings.Contains(log.String(), "listening") }, log)
	if !strings.Contains(log.String(), want) {
		t.Fatalf("run's log does not warn of profile talk:\n%s", log)
	}
	writeProfiles(t, "data", map[string]string{"speaker": "tts: {mode: inbound}\n"})
	code, out = cli(t, ctx, nil, "reload", "--config", "gateway.yaml")
	if code != 0 || !strings.Contains(out, "profile speaker: tts.mode is inbound in ") {
		t.Errorf("gateway reload: exit %d; want 0 and a warning naming profile speaker:\n%s", code, out)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run: exit %d; want 0:\n%s", code, log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30s of its context:\n%s", log)
	}
}
