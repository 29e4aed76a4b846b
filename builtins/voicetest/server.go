package voicetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/internal/audio"
	"gateway/internal/fakeserver"
)

// DefaultTranscript is what the server transcribes every upload to unless told otherwise.
const DefaultTranscript = "hello from the fake speech service"

// DefaultSpeech is the sentence the speech endpoint returns (spoken once, at start).
const DefaultSpeech = "this is a spoken reply"

// Upload is one request to /audio/transcriptions, as the server received it.
type Upload struct {
	Model          string
	Language       string
	ResponseFormat string
	Filename       string
	ContentType    string // of the file part
	Data           []byte
	Header         http.Header // the request's headers (Authorization among them)
}

// SpeechRequest is one request to /audio/speech.
type SpeechRequest struct {
	Model          string `json:"model"`
	Voice          string `json:"voice"`
	Input          string `json:"input"`
	ResponseFormat string `json:"response_format"`
}

// Speech formats the speech endpoint can answer with.
const (
	SpeechOgg = "ogg" // real Ogg/Opus, what the client asked for
	SpeechWAV = "wav" // WAV whatever was asked, to exercise conversion
)

// Server is a fake OpenAI-compatible audio API. Configure it with the Set methods at any
// time; it is safe for concurrent use. It closes when the test ends.
type Server struct {
	fs    *fakeserver.Server
	fails fakeserver.Failures

	mu          sync.Mutex
	transcriber func(Upload) (string, error)
	speaker     func(SpeechRequest) // called before each speech answer (nil: none)
	speechFmt   string
	speakInput  bool
	ogg, wav    []byte // DefaultSpeech, spoken at start
	delay       time.Duration
	apiKey      string
	uploads     []Upload
	speeches    []SpeechRequest
	requests    int
}

// NewServer starts a fake audio API on 127.0.0.1. It needs espeak-ng and ffmpeg (see
// RequireTools) to prepare real speech audio.
func NewServer(t testing.TB) *Server {
	t.Helper()
	RequireTools(t, "espeak-ng", "ffmpeg")
	wav := SpeakWAV(t, DefaultSpeech)
	ogg, err := Convert(t.Context(), wav, audio.ToOggOpus)
	if err != nil {
		t.Fatalf("voicetest: preparing speech: %v", err)
	}
	s := &Server{
		transcriber: func(Upload) (string, error) { return DefaultTranscript, nil },
		speechFmt:   SpeechOgg,
		ogg:         ogg,
		wav:         wav,
	}
	mux := http.NewServeMux()
	for _, prefix := range []string{"", "/v1"} {
		mux.HandleFunc("POST "+prefix+"/audio/transcriptions", s.transcriptions)
		mux.HandleFunc("POST "+prefix+"/audio/speech", s.speech)
	}
	s.fs = fakeserver.New(mux)
	t.Cleanup(s.fs.Close)
	return s
}

// URL is the base URL to configure (ends in /v1, like the real API's).
func (s *Server) URL() string { return s.fs.URL + "/v1" }

// SetTranscript makes every transcription return text.
func (s *Server) SetTranscript(text string) {
	s.SetTranscriber(func(Upload) (string, error) { return text, nil })
}

// SetTranscriber makes transcriptions return fn's text for the upload; an error answers 500.
func (s *Server) SetTranscriber(fn func(Upload) (string, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transcriber = fn
}

// SetSpeaker has fn called with each speech request before it is answered (it may block,
// as a slow service would).
func (s *Server) SetSpeaker(fn func(SpeechRequest)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.speaker = fn
}

// SetSpeechFormat chooses what /audio/speech returns: SpeechOgg or SpeechWAV.
func (s *Server) SetSpeechFormat(format string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.speechFmt = format
}

// SetSpeakInput makes /audio/speech speak each request's input with espeak-ng instead of
// returning DefaultSpeech (slower: about 0.1 s a request).
func (s *Server) SetSpeakInput(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.speakInput = on
}

// FailNext makes the next n requests f applies to answer f.Code() with an OpenAI-style
// error body (and a Retry-After header, whole seconds rounded up, when f.RetryAfter > 0).
// f.Method "" applies to either endpoint; "transcriptions" or "speech" names one.
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// SetDelay makes every request wait d (or until the client gives up) before answering.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// RequireKey makes the server answer 401 unless the request carries "Bearer key".
func (s *Server) RequireKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// Uploads returns the transcription requests answered so far (not the failed ones).
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upload(nil), s.uploads...)
}

// SpeechRequests returns the speech requests answered so far (not the failed ones).
func (s *Server) SpeechRequests() []SpeechRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SpeechRequest(nil), s.speeches...)
}

// Requests counts every request received, failed ones included (retries show here).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// SpeechAudio returns the DefaultSpeech audio the server answers with, as Ogg/Opus and WAV.
func (s *Server) SpeechAudio() (ogg, wav []byte) {
	return bytes.Clone(s.ogg), bytes.Clone(s.wav)
}

// begin counts the request, applies the delay and the scripted failure, and reports
// whether the handler should go on.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) bool {
	// Read the whole body first: until it is consumed, the server would not notice a
	// client that gave up, and a delayed handler would hold Close.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 32<<20))
	if err != nil {
		apiError(w, http.StatusRequestEntityTooLarge, "body too large")
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	s.requests++
	delay, key := s.delay, s.apiKey
	s.mu.Unlock()
	fail, failed := s.fails.Take(path.Base(r.URL.Path), "", nil)
	if !s.fs.Wait(r, delay) {
		return false
	}
	if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
		apiError(w, http.StatusUnauthorized, "Incorrect API key provided.")
		return false
	}
	if failed {
		msg := fail.Message
		if msg == "" {
			msg = "scripted failure"
		}
		if fail.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(fail.Seconds()))
		}
		apiError(w, fail.Code(), msg)
		return false
	}
	return true
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	// No retry-after: the SDK would otherwise wait for it.
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": "server_error", "code": nil}})
}

func (s *Server) transcriptions(w http.ResponseWriter, r *http.Request) {
	if !s.begin(w, r) {
		return
	}
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		apiError(w, http.StatusBadRequest, "bad multipart body: "+err.Error())
		return
	}
	defer r.MultipartForm.RemoveAll()
	f, hdr, err := r.FormFile("file")
	if err != nil {
		apiError(w, http.StatusBadRequest, "missing file")
		return
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		apiError(w, http.StatusBadRequest, "reading file: "+err.Error())
		return
	}
	up := Upload{
		Model:          r.FormValue("model"),
		Language:       r.FormValue("language"),
		ResponseFormat: r.FormValue("response_format"),
		Filename:       hdr.Filename,
		ContentType:    hdr.Header.Get("Content-Type"),
		Data:           data,
		Header:         r.Header.Clone(),
	}
	if up.Model == "" {
		apiError(w, http.StatusBadRequest, "you must provide a model parameter")
		return
	}
	s.mu.Lock()
	fn := s.transcriber
	s.mu.Unlock()
	text, err := fn(up)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.mu.Lock()
	s.uploads = append(s.uploads, up)
	s.mu.Unlock()
	if up.ResponseFormat == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, text)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"text": text})
}

func (s *Server) speech(w http.ResponseWriter, r *http.Request) {
	if !s.begin(w, r) {
		return
	}
	var req SpeechRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return
	}
	if req.Model == "" || req.Voice == "" || strings.TrimSpace(req.Input) == "" {
		apiError(w, http.StatusBadRequest, "model, voice and input are required")
		return
	}
	s.mu.Lock()
	format, speak, ogg, wav, speaker := s.speechFmt, s.speakInput, s.ogg, s.wav, s.speaker
	s.mu.Unlock()
	if speaker != nil {
		speaker(req)
	}
	if speak {
		var err error
		if wav, err = SpeakWAVContext(r.Context(), req.Input); err == nil {
			ogg, err = Convert(r.Context(), wav, audio.ToOggOpus)
		}
		if err != nil {
			apiError(w, http.StatusInternalServerError, "speaking: "+err.Error())
			return
		}
	}
	s.mu.Lock()
	s.speeches = append(s.speeches, req)
	s.mu.Unlock()
	body, ctype := ogg, "audio/ogg"
	if format == SpeechWAV {
		body, ctype = wav, "audio/wav"
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(body)
}
