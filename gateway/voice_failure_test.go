package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/builtins/voicetest"
	"gateway/channels"
	"gateway/channels/telegram/telegramtest"
)

// Audio the speech tool cannot transcribe does not take the words sent with it: the user
// is told plainly about the audio, and the caption reaches the model once, with a note
// that the audio could not be transcribed. Each case uses a real speech tool failing in
// one of its ways.

// sttCommand registers the command STT provider with argv (timeout: its limit) and the
// local TTS, as localVoice does.
func sttCommand(t *testing.T, argv []string, timeout time.Duration) envOpt {
	voicetest.RequireTools(t, "espeak-ng", "pocketsphinx_continuous", "ffmpeg", "ffprobe")
	sttCfg := stt.DefaultConfig()
	sttCfg.Enabled, sttCfg.Provider, sttCfg.Command, sttCfg.InputFormat, sttCfg.Timeout = true, "command", argv, stt.InputWAV, timeout
	ttsCfg := tts.DefaultConfig()
	ttsCfg.Mode, ttsCfg.Provider, ttsCfg.Command, ttsCfg.OutputFormat = "inbound", "command", voicetest.EspeakCommand(), "wav"
	return withVoice(t, sttCfg, ttsCfg)
}

// brokenRecognizer is pocketsphinx pointed at a grammar that does not exist: it exits 1.
func brokenRecognizer(t *testing.T) envOpt {
	return sttCommand(t, voicetest.PocketsphinxCommand("/nonexistent/phrases.gram"), 0)
}

// hangingRecognizer never answers within its one-second limit (it is given the audio as
// its $0 and ignores it).
func hangingRecognizer(t *testing.T) envOpt {
	return sttCommand(t, []string{"sh", "-c", "sleep 60", "{input}"}, time.Second)
}

// deafRecognizer is pocketsphinx given silence: it prints nothing.
func deafRecognizer(t *testing.T) envOpt {
	return sttCommand(t, voicetest.PocketsphinxCommand(voicetest.Grammar(t, spoken)), 0)
}

// telegramTexts waits until chat 4242 holds n text messages from the bot and returns them.
func telegramTexts(t *testing.T, tg *telegramtest.Server, n int) []string {
	t.Helper()
	waitUntil(t, "bot messages", func() bool { return len(telegramAnswers(tg)) >= n })
	return telegramAnswers(tg)
}

// assertCaptionReachedModel checks that the model was asked once, with the caption and a
// note that the audio could not be transcribed.
func assertCaptionReachedModel(t *testing.T, e *testEnv, caption string) {
	t.Helper()
	reqs := e.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d; want exactly one", len(reqs))
	}
	got := lastUser(reqs[0])
	if !strings.Contains(got, caption) || !strings.Contains(got, "could not be transcribed") {
		t.Fatalf("the model received %q; want the caption %q and a note that the audio could not be transcribed", got, caption)
	}
}

func TestVoiceNoteThatFailsToTranscribeKeepsItsCaptionOnTelegram(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, brokenRecognizer(t))
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Voice: voicetest.SpeakOgg(t, spoken), Caption: "remind me at six"})
	texts := telegramTexts(t, tg, 2)
	time.Sleep(300 * time.Millisecond) // nothing more comes
	texts = telegramAnswers(tg)
	if len(texts) != 2 || !strings.Contains(texts[0], "couldn't transcribe your voice note") || texts[1] != "ok" {
		t.Fatalf("the bot posted %q; want the notice about the voice note, then one answer", texts)
	}
	assertCaptionReachedModel(t, e, "remind me at six")
	for _, m := range tg.Messages(4242) {
		if m.Kind == "voice" {
			t.Fatal("the answer to a caption whose voice note was not heard was spoken")
		}
	}

	// A voice note alone is still only told about: nothing reaches the model.
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Voice: voicetest.SpeakOgg(t, spoken)})
	texts = telegramTexts(t, tg, 3)
	if !strings.Contains(texts[2], "couldn't transcribe your voice note") {
		t.Fatalf("a lone voice note got %q", texts[2])
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("model requests = %d after a lone untranscribable voice note; want still 1", n)
	}
}

func TestAudioDocumentThatHangsTheRecognizerKeepsItsCaptionOnTelegram(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch}, hangingRecognizer(t))
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Caption: "minutes of today", Document: voicetest.SpeakOgg(t, spoken),
		DocumentName: "memo.opus", DocumentMIME: "audio/ogg"})
	texts := telegramTexts(t, tg, 2)
	time.Sleep(300 * time.Millisecond)
	texts = telegramAnswers(tg)
	if len(texts) != 2 || !strings.Contains(texts[0], "couldn't transcribe your audio file") || !strings.Contains(texts[0], "in time") || texts[1] != "ok" {
		t.Fatalf("the bot posted %q; want the notice about the audio file, then one answer", texts)
	}
	assertCaptionReachedModel(t, e, "minutes of today")
}

func TestSilentVoiceNoteKeepsItsTextInTheWebChat(t *testing.T) {
	e := newEnv(t, deafRecognizer(t))
	c := e.client(t, "deaf")
	silence := voicetest.Encode(t, voicetest.SilenceWAV(2*time.Second), "ogg")
	b, _ := json.Marshal(map[string]any{"type": "message", "id": "m1", "chat_id": "deaf", "text": "what about this?",
		"audio": map[string]string{"mime": "audio/ogg", "data": base64.StdEncoding.EncodeToString(silence)}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	notice := c.until("done", "error")
	if last := notice[len(notice)-1]; !strings.Contains(last.Text, "couldn't transcribe your voice note") || !strings.Contains(last.Text, "hear any words") {
		t.Fatalf("first answer %+v; want the notice about the voice note", last)
	}
	answer := c.until("done", "error")
	if last := answer[len(answer)-1]; last.Type != "done" || last.Text != "ok" {
		t.Fatalf("second answer %+v; want the model's answer", last)
	}
	assertCaptionReachedModel(t, e, "what about this?")
}

// A speech service slow to answer for some chats does not hold up another chat's voice
// note: the wait for the service is no audio job of the gateway's, so it takes none of the
// few slots the converters share. Here as many voice notes as there are slots hang at the
// service (in transcription, then in speech), and one more chat's is still answered, with
// its spoken reply.
func TestSlowSpeechServiceForSomeChatsHoldsUpNoOther(t *testing.T) {
	for _, stage := range []string{"transcriptions", "speech"} {
		t.Run(stage, func(t *testing.T) {
			srv := voicetest.NewServer(t)
			srv.SetTranscript(spoken)
			hang := max(2, runtime.NumCPU()) // speech.NewSlots
			var (
				mu      sync.Mutex
				calls   int
				hanging = make(chan struct{}, hang)
			)
			release := make(chan struct{})
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			slowly := func() {
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if n <= hang {
					hanging <- struct{}{}
					<-release
				}
			}
			if stage == "speech" {
				srv.SetSpeaker(func(voicetest.SpeechRequest) { slowly() })
			} else {
				srv.SetTranscriber(func(voicetest.Upload) (string, error) { slowly(); return spoken, nil })
			}
			e := newEnv(t, openAIVoice(t, srv))
			note := voicetest.SpeakOgg(t, spoken)
			slow := make([]*wsClient, hang)
			for i := range slow {
				slow[i] = e.client(t, fmt.Sprintf("slow%d", i))
				slow[i].sayVoice(note)
			}
			for range hang {
				<-hanging // every slow chat's voice note is at the service
			}
			c := e.client(t, "quick")
			c.sayVoice(note)
			fs := c.until("done", "error")
			if last := fs[len(fs)-1]; last.Type != "done" || len(e.voiceParts(t, fs)) != 1 {
				t.Fatalf("the other chat's voice note was answered with %v %+v; want an answer with its voice note", types(fs), last)
			}
			close(release)
			for i, s := range slow {
				if fs := s.until("done", "error"); fs[len(fs)-1].Type != "done" {
					t.Fatalf("slow chat %d was answered with %+v once the service answered", i, fs[len(fs)-1])
				}
			}
		})
	}
}
