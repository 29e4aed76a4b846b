package gatewaycli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gateway/builtins/voicetest"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
)

// With a relative state_dir (the default ./data), the files people send reach the programs
// the gateway starts by paths those programs can open: a hook program runs in its own
// folder, and a speech recognizer's wrapper script may change directory before it reads
// its {input}.
func TestProgramsFindTheFilesPeopleSend(t *testing.T) {
	voicetest.RequireTools(t, "ffmpeg", "ffprobe", "espeak-ng")
	tg := telegramtest.NewServer(t)
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close)
	root, addr := t.TempDir(), freePort(t)
	// The hook tells the model whether the file of each media part is where its path says.
	writeHook(t, filepath.Join(root, "hooks"), "find-files", receiveYAML, `for p in $(sed 's/"path":"/\n/g' | sed -n '2,$s/".*//p'); do
  if [ -f "$p" ]; then found="$found found"; else found="$found missing:$p"; fi
done
[ -z "$found" ] || printf '{"action":"transform","text":"hook%s"}\n' "$found"
`)
	channel := fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID))
	speech := `hooks: {dirs: [./hooks]}
stt:
  enabled: true
  provider: command
  command: [sh, -c, 'cd / && if [ -f "$0" ]; then echo recognizer found; else echo "recognizer missing $0"; fi', "{input}"]
`
	writeChildConfig(t, root, addr, oai.URL(), channel+speech)
	g := startChild(t, root, addr)

	tg.Send(telegramtest.Update{ChatID: tgChat, Document: []byte("milk, eggs"), DocumentName: "list.txt", DocumentMIME: "text/plain"})
	waitFor(t, "the document is answered", func() bool { return len(oai.Requests()) == 1 }, g.log)
	if got := lastUser(oai.Requests()[0]); !strings.Contains(got, "hook found") || strings.Contains(got, "missing") {
		t.Errorf("the model was told %q; want the hook to have found the document", got)
	}

	tg.Send(telegramtest.Update{ChatID: tgChat, Voice: voicetest.SpeakOgg(t, "hello")})
	waitFor(t, "the voice note is answered", func() bool { return len(oai.Requests()) == 2 }, g.log)
	if got := lastUser(oai.Requests()[1]); !strings.Contains(got, "recognizer found") || strings.Contains(got, "missing") {
		t.Errorf("the model was told %q; want the recognizer to have found the voice note", got)
	}
}

// Telegram's files live in state_dir/telegram, not state_dir/telegram/telegram where earlier
// versions put them (the adapter's name was joined twice); what those versions left there
// is moved up at start and still used: an old inbox journal's message is answered.
func TestTelegramFilesAreNotInADoubledFolder(t *testing.T) {
	tg := telegramtest.NewServer(t)
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close)
	root, addr := t.TempDir(), freePort(t)
	old := filepath.Join(root, "data", "telegram", "telegram")
	for name, data := range map[string]string{
		"inbox/00000000000000000900.json": fmt.Sprintf(`{"update_id":900,"message":{"message_id":77,"date":1,"chat":{"id":%d,"type":"private"},"from":{"id":%d,"is_bot":false,"first_name":"Alice"},"text":"from the old inbox"}}`, tgChat, telegramtest.UserID),
		"media/4242_1_0.jpg":              "an earlier download",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(old, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(old, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	channel := fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
		telegramtest.Token, tg.URL, fmt.Sprint(telegramtest.UserID))
	writeChildConfig(t, root, addr, oai.URL(), channel)
	g := startChild(t, root, addr)

	waitFor(t, "the old inbox's message is answered", func() bool { return len(oai.Requests()) == 1 }, g.log)
	if got := lastUser(oai.Requests()[0]); !strings.Contains(got, "from the old inbox") {
		t.Fatalf("the model was asked %q; want the old inbox's message", got)
	}
	tg.Send(telegramtest.Update{ChatID: tgChat, Document: []byte("milk, eggs"), DocumentName: "list.txt", DocumentMIME: "text/plain"})
	waitFor(t, "the document is answered", func() bool { return len(oai.Requests()) == 2 }, g.log)
	g.stop()

	media := filepath.Join(root, "data", "telegram", "media")
	if got, _ := filepath.Glob(filepath.Join(media, "4242_*")); len(got) != 2 { // the earlier one and the document
		t.Errorf("the document's download is not in %s: %v", media, got)
	}
	if b, err := os.ReadFile(filepath.Join(media, "4242_1_0.jpg")); err != nil || string(b) != "an earlier download" {
		t.Errorf("the earlier download was not moved to %s: %q, %v", media, b, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the doubled folder %s is still there (%v)", old, err)
	}
}
