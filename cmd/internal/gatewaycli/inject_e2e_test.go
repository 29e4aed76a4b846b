package gatewaycli

// End-to-end tests of injected messages and crashes: whichever way POST /api/v1/inject
// puts a message into a chat (steer into the running turn, kept for the next turn), once
// the API took it, it reaches the model once, a SIGKILL of `gateway run` notwithstanding.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"gateway/harness/openaitest"
)

// postInject injects into the test's Telegram chat; fields are the request's other JSON
// fields. It fails the test unless the API took the message.
func postInject(t *testing.T, g *child, fields string) {
	t.Helper()
	body := fmt.Sprintf(`{"channel":"telegram","chat_id":"%d",%s}`, tgChat, fields)
	resp, err := http.Post("http://"+g.addr+"/api/v1/inject", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inject %s: %d; log:\n%s", fields, resp.StatusCode, g.log)
	}
}

// askedWith waits for the model request whose last user message is text and returns the
// requests up to it: any turn run before it (a message delivered again) is among them.
func askedWith(t *testing.T, oai *slowModel, text string, g *child) []openaitest.Request {
	t.Helper()
	var upTo []openaitest.Request
	waitFor(t, fmt.Sprintf("the model is asked %q", text), func() bool {
		reqs := oai.Requests()
		for i, r := range reqs {
			if u := userTurns(r); len(u) > 0 && u[len(u)-1] == text {
				upTo = reqs[:i+1]
				return true
			}
		}
		return false
	}, g.log)
	return upTo
}

// settledCount is how many journaled messages the gateway's log says were let go.
func settledCount(g *child) int { return strings.Count(g.log.String(), "message settled") }

// A steer injected into a turn whose model call a SIGKILL then cuts: after the restart the
// user's message is answered again and the steer after it, each once, and the model sees
// the steer once in the conversation that goes on.
func TestKilledWithASteerInTheRunningTurnAnswersItOnceAfterRestart(t *testing.T) {
	p := telegramPlatform(t)
	oai := cutModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("hello there")
	waitFor(t, "the preview shows", func() bool { return len(p.answer()) == 1 }, g.log)
	waitFor(t, "its place is kept", func() bool { return strings.Contains(g.log.String(), "answer placement kept") }, g.log)
	postInject(t, g, `"text":"also check the logs","deliver_as":"steer"`)
	g.kill()

	g = startChild(t, root, addr)
	waitFor(t, "both answered after the restart", func() bool { return slices.Equal(p.answer(), []string{"answer 2", "answer 3"}) }, g.log)
	p.send("and then?")
	reqs := askedWith(t, oai, "and then?", g)
	if len(reqs) != 4 {
		t.Fatalf("the model was called %d times up to the next message; want 4 (the cut call, the message again, the steer, the next message); log:\n%s", len(reqs), g.log)
	}
	if u := userTurns(reqs[1]); !slices.Equal(u, []string{"hello there"}) {
		t.Errorf("after the restart the message was asked with %q; want it once, without the steer it was cut with", u)
	}
	if u := userTurns(reqs[3]); !slices.Equal(u, []string{"hello there", "also check the logs", "and then?"}) {
		t.Errorf("the next message was asked with the user's turns %q; want the steer once", u)
	}
	waitFor(t, "the next message answered", func() bool { return len(p.answer()) == 3 }, g.log)
	if got := p.answer(); !slices.Equal(got, []string{"answer 2", "answer 3", "answer 4"}) {
		t.Errorf("the chat shows %q; want each answer once", got)
	}
	g.stop()
}

// A steer that joined the running turn at a save point (saved in the history with the
// model's first answer), then a SIGKILL during the turn's next model call: after the
// restart the turn is asked again without it and the steer comes after, once, not twice.
func TestKilledAfterASteerWasSavedDeliversItOnceAfterRestart(t *testing.T) {
	p := telegramPlatform(t)
	oai := &slowModel{Server: openaitest.NewServer()}
	gate := make(chan struct{})
	oai.SetFunc(func(openaitest.Request) openaitest.Reply {
		switch n := oai.n.Add(1); n {
		case 1:
			<-gate // the first call waits for the steer
			return openaitest.Reply{Text: "answer 1"}
		case 2:
			return openaitest.Reply{Hang: true} // the call after the steer joined: the kill comes
		default:
			return openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
		}
	})
	t.Cleanup(oai.Close)
	t.Cleanup(func() { close(gate) })
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("hello there")
	waitFor(t, "the model is called", func() bool { return oai.calls() == 1 }, g.log)
	postInject(t, g, `"text":"also check the logs","deliver_as":"steer"`)
	gate <- struct{}{}
	askedWith(t, oai, "also check the logs", g) // saved before this call
	g.kill()

	g = startChild(t, root, addr)
	p.send("and then?")
	reqs := askedWith(t, oai, "and then?", g)
	if len(reqs) != 5 {
		t.Fatalf("the model was called %d times up to the next message; want 5 (two cut, the message again, the steer, the next message); log:\n%s", len(reqs), g.log)
	}
	if u := userTurns(reqs[2]); !slices.Equal(u, []string{"hello there"}) {
		t.Errorf("after the restart the message was asked with %q; want it once, without the steer it was cut with", u)
	}
	if u := userTurns(reqs[4]); !slices.Equal(u, []string{"hello there", "also check the logs", "and then?"}) {
		t.Errorf("the next message was asked with the user's turns %q; want the steer once", u)
	}
	g.stop()
}

// A next_turn inject, then a SIGKILL before the chat's next turn: after the restart the
// user's next message carries it, once; answered, it is not carried again after another
// SIGKILL, only kept in the conversation.
func TestKilledWithANextTurnInjectCarriesItInTheNextTurnOnce(t *testing.T) {
	p := telegramPlatform(t)
	oai := newSlowModel(t)
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	postInject(t, g, `"text":"(the user's calendar: free at 3pm)","deliver_as":"next_turn"`)
	g.kill()

	g = startChild(t, root, addr)
	p.send("when am I free?")
	want := "(the user's calendar: free at 3pm)\n\nwhen am I free?"
	reqs := askedWith(t, oai, want, g)
	if len(reqs) != 1 {
		t.Fatalf("the model was called %d times; want once, for the message", len(reqs))
	}
	if u := userTurns(reqs[0]); !slices.Equal(u, []string{want}) {
		t.Errorf("the model was asked %q; want the injected text once, before the message", u)
	}
	waitFor(t, "answered", func() bool { return len(p.answer()) == 1 }, g.log)
	waitFor(t, "both left the journal", func() bool { return settledCount(g) == 2 }, g.log)
	g.kill()

	g = startChild(t, root, addr)
	p.send("thanks")
	reqs = askedWith(t, oai, "thanks", g)
	if u := userTurns(reqs[len(reqs)-1]); len(reqs) != 2 || !slices.Equal(u, []string{want, "thanks"}) {
		t.Fatalf("after another restart: %d model calls, the last asked with %q; want 2, the injected text once", len(reqs), u)
	}
	g.stop()
}

// A steer that joined a turn which then ended and was answered is not delivered again
// after a SIGKILL: the model sees it once, where it joined.
func TestAnsweredSteerIsNotDeliveredAgainAfterAKill(t *testing.T) {
	p := telegramPlatform(t)
	oai := &slowModel{Server: openaitest.NewServer()}
	gate := make(chan struct{})
	oai.SetFunc(func(openaitest.Request) openaitest.Reply {
		n := oai.n.Add(1)
		if n == 1 {
			<-gate // the first call waits for the steer
		}
		return openaitest.Reply{Text: fmt.Sprintf("answer %d", n)}
	})
	t.Cleanup(oai.Close)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	root, addr := newRoot(t, oai, p)
	g := startChild(t, root, addr)
	p.send("hello there")
	waitFor(t, "the model is called", func() bool { return oai.calls() == 1 }, g.log)
	postInject(t, g, `"text":"also check the logs","deliver_as":"steer"`)
	close(gate)
	reqs := askedWith(t, oai, "also check the logs", g)
	if len(reqs) != 2 {
		t.Fatalf("the steer was sent in call %d; want the running turn's second call", len(reqs))
	}
	waitFor(t, "answered", func() bool { return len(p.answer()) > 0 }, g.log)
	waitFor(t, "both left the journal", func() bool { return settledCount(g) == 2 }, g.log)
	g.kill()

	g = startChild(t, root, addr)
	p.send("and then?")
	reqs = askedWith(t, oai, "and then?", g)
	if len(reqs) != 3 {
		t.Fatalf("the model was called %d times up to the next message; want 3 (nothing delivered again); log:\n%s", len(reqs), g.log)
	}
	if u := userTurns(reqs[2]); !slices.Equal(u, []string{"hello there", "also check the logs", "and then?"}) {
		t.Errorf("the next message was asked with the user's turns %q; want the steer once", u)
	}
	g.stop()
}
