// Package web is the local web chat: one self-contained page served on the gateway's HTTP
// listener and a WebSocket that carries the chat. On loopback it needs no token, so it is the
// way to try the gateway with nothing configured.
//
// # Routes
//
//	GET /            the chat page (one embedded HTML file, no external assets; exactly "/", so
//	                 the gateway's other routes and 404s are not swallowed)
//	GET /ws          the WebSocket (query: chat_id=<id>)
//	GET /media/{id}  audio and images the channel sent in a parts frame
//
// # Token
//
// With channels.web.token set (required when the gateway listens beyond loopback), the
// WebSocket and the media route require it. The page itself holds nothing secret and is
// served to anyone; it asks for the token once, keeps it in localStorage and offers it as a
// WebSocket subprotocol "gateway.token.<base64url of the token>" next to "gateway.v1" (the
// one the server selects); other clients may send "Authorization: Bearer <token>" instead.
// A socket without the right token is closed right after the upgrade with status 4401 (a
// browser cannot read the status of a refused upgrade), and the page asks again. The upgrade
// that brought the right token sets an HttpOnly cookie derived from it (not the token) that
// lets the page's <audio> and <img> elements load media. Tokens are compared in constant
// time and never logged.
//
// Every route answers only to a Host that is an IP literal, localhost (or *.localhost), or
// listed in allowed_hosts, and the WebSocket refuses an Origin that is neither the page's own
// origin nor a loopback host: a page on another site cannot talk to the chat, not even
// through DNS rebinding.
//
// # Wire protocol
//
// One JSON object per WebSocket text message.
//
// Client to server:
//
//	{"type":"message","id":"<client msg id>","chat_id":"<id>","user_id":"<optional>",
//	 "text":"hello","audio":{"mime":"audio/webm","data":"<base64>"},
//	 "files":[{"mime":"image/png","name":"screenshot.png","data":"<base64>"}]}
//
// id is chosen by the client and reused when the client resends after a reconnect; a
// redelivered id is acknowledged again and dropped. chat_id and id are 1-128 characters of
// [A-Za-z0-9_.:-]; the socket binds to the chat_id of its query or of its first message. A
// message carries text, audio, files, or several of them; audio arrives at the gateway as an
// AudioPart with Voice set and the message marked IsVoice; files (at most 10, picked, pasted
// or dropped into the page, sharing max_upload_bytes with the audio) as ImageParts (image/*),
// AudioParts without Voice (audio/*: transcribed, the answer not spoken) or FileParts, with
// their names. user_id is optional ("web" when absent): the web
// chat has no accounts, so it is a label, not an identity.
//
// Server to client:
//
//	{"type":"hello","chat_id":"<id>","max_upload_bytes":20000000,   the socket is ready
//	 "max_text_bytes":65536,                                         (UTF-8 bytes of a text)
//	 "history":[{"role":"user","id":"<client msg id>","text":"hi","voice":false,
//	             "parts":[{"type":"image","url":"/media/<id>","name":"a.png"},{"type":"file","name":"b.pdf"}]},
//	            {"role":"assistant","reply_to":"<client msg id>","text":"...","error":false,
//	             "parts":[...],"streaming":false}]}
//	{"type":"ack","reply_to":"<client msg id>"}                     the gateway took the message
//	{"type":"user","id":"<client msg id>","text":"hi","voice":false,  sent from another tab of
//	 "parts":[...]}                                                  the chat (not the sender's)
//	{"type":"start|delta|tool|status|parts|done|error","text":"...",
//	 "tool":{"id":"...","name":"current_time","phase":"start|end","is_error":false,"summary":"..."},
//	 "parts":[{"type":"audio","mime":"audio/ogg","url":"/media/<id>","voice":true,"duration":1.5}],
//	 "reply_to":"<client msg id>"}
//
// The answer frames are channels.Frame with reply_to added (the user's message id, when the
// answer has one). An error frame also reports a message that was not taken (too large,
// malformed, gateway busy or stopping), with reply_to naming it and a plain-language text;
// the chat's other tabs, which were sent the message as a user frame, get it too when the
// gateway refused it.
// A message larger than the socket's read limit (a little above max_upload_bytes*4/3) closes
// the socket with status 1009 (message too big); nothing of it is delivered.
//
// # History
//
// hello carries the chat's recent transcript (the user's messages the gateway took and the
// finished answers, oldest first, each answer right after its question as the page shows it
// live), so a reloaded page shows the conversation again; the page renders it on the first
// hello of a page load. Answers still being written follow, marked "streaming" with what
// they said so far; the socket then gets each of their later frames, and none before hello,
// so a tab opened, reloaded or reconnected mid-answer shows the answer from its beginning. The transcript is kept by the channel,
// in memory and bounded (see history.go), because only the server sees answers that finish
// while no tab is open; /new (or /reset) starts it over.
package web
