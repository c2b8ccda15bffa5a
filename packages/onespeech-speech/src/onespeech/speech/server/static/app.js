// The OneSpeech page: a client of the server's public API only
// (GET /v1/models, POST /v1/audio/transcriptions, POST /v1/documents/render, WS /v1/audio/stream).
// Text from the server is always set with textContent, never parsed as HTML.
"use strict";

const FORMATS = ["txt", "srt", "vtt", "tsv", "json"];
const COLOURS = ["#3b6fd4", "#e07b39", "#3a9e5c", "#b9457a", "#7d5bc4", "#c4a52b", "#2b9ab3", "#8a6c4e"];
const $ = (id) => document.getElementById(id);

const state = { model: null, document: null, words: [], downloads: [], live: null };

function apiKey() {
  return $("api-key").value.trim();
}

function headers() {
  const key = apiKey();
  return key ? { Authorization: "Bearer " + key } : {};
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").classList.toggle("error", Boolean(isError));
}

function errorText(status, body) {
  try {
    const parsed = JSON.parse(body);
    if (parsed && parsed.error && parsed.error.message) return parsed.error.message;
  } catch (ignored) { /* not JSON: show the status */ }
  return "the server answered " + status;
}

async function loadModel() {
  const answer = await fetch("v1/models", { headers: headers() });
  const body = await answer.text();
  if (!answer.ok) {
    setStatus(errorText(answer.status, body), true);
    return;
  }
  const models = JSON.parse(body).data;
  state.model = models.length ? models[0].id : null;
  $("model").textContent = state.model ? "model " + state.model : "";
}

function formatTime(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const whole = Math.floor(seconds);
  const m = Math.floor(whole / 60), s = whole % 60, ms = Math.round((seconds - whole) * 1000);
  return `${m}:${String(s).padStart(2, "0")}.${String(ms).padStart(3, "0").slice(0, 2)}`;
}

// --- a file: upload, then the document ---

function transcribeFile(file) {
  if (!state.model) {
    setStatus("the server has no model loaded (or the API key is missing)", true);
    return;
  }
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("model", state.model);
  form.append("response_format", "document");
  form.append("speakers", $("speakers").value);
  const language = $("language").value.trim();
  if (language) form.append("language", language);

  const request = new XMLHttpRequest();
  request.open("POST", "v1/audio/transcriptions");
  for (const [name, value] of Object.entries(headers())) request.setRequestHeader(name, value);
  const progress = $("progress");
  progress.hidden = false;
  progress.value = 0;
  request.upload.onprogress = (event) => {
    if (event.lengthComputable) progress.value = event.loaded / event.total;
    setStatus(`uploading ${file.name}: ${Math.round(100 * event.loaded / Math.max(event.total, 1))} %`);
  };
  request.upload.onload = () => {
    progress.removeAttribute("value"); // indeterminate while the server transcribes
    setStatus(`transcribing ${file.name}…`);
  };
  request.onerror = () => {
    progress.hidden = true;
    setStatus("the request failed: the server could not be reached", true);
  };
  request.onload = () => {
    progress.hidden = true;
    if (request.status !== 200) {
      setStatus(errorText(request.status, request.responseText), true);
      return;
    }
    setStatus(`${file.name}: done`);
    showDocument(request.responseText, URL.createObjectURL(file));
  };
  request.send(form);
}

function speakerColours(document) {
  const colours = new Map();
  for (const speaker of document.speakers || []) {
    colours.set(speaker.label, COLOURS[colours.size % COLOURS.length]);
  }
  for (const segment of document.segments) {
    if (segment.speaker && !colours.has(segment.speaker)) {
      colours.set(segment.speaker, COLOURS[colours.size % COLOURS.length]);
    }
  }
  return colours;
}

// ``text`` is the Document's JSON as the server wrote it; downloads send it back unchanged.
function showDocument(text, audioUrl) {
  const doc = JSON.parse(text);
  state.document = doc;
  $("result").hidden = false;
  $("language-out").textContent = doc.language || "unknown";
  $("duration-out").textContent = formatTime(doc.duration);
  const player = $("player");
  player.hidden = !audioUrl;
  if (audioUrl) player.src = audioUrl;
  const colours = speakerColours(doc);
  drawTimeline(doc, colours);
  drawSegments(doc, colours);
  prepareDownloads(text);
}

// Who spoke when: runs of consecutive timed words of one speaker, or a whole segment where
// its words carry no times.
function speakerRuns(doc) {
  const runs = [];
  for (const segment of doc.segments) {
    const timed = (segment.words || []).filter((w) => w.speaker && w.start !== null && w.start !== undefined);
    if (!timed.length) {
      if (segment.speaker) runs.push({ speaker: segment.speaker, start: segment.start, end: segment.end });
      continue;
    }
    for (const word of timed) {
      const last = runs[runs.length - 1];
      if (last && last.speaker === word.speaker && word.start - last.end < 2.0) last.end = Math.max(last.end, word.end);
      else runs.push({ speaker: word.speaker, start: word.start, end: word.end });
    }
  }
  return runs;
}

function drawTimeline(doc, colours) {
  const timeline = $("timeline"), legend = $("legend");
  timeline.replaceChildren();
  legend.replaceChildren();
  const duration = Math.max(doc.duration || 0, 1e-6);
  for (const run of speakerRuns(doc)) {
    const turn = document.createElement("div");
    turn.className = "turn";
    turn.dataset.speaker = run.speaker;
    turn.style.left = (100 * run.start / duration) + "%";
    turn.style.width = Math.max(0.2, 100 * (run.end - run.start) / duration) + "%";
    turn.style.background = colours.get(run.speaker);
    turn.title = `${run.speaker} ${formatTime(run.start)}–${formatTime(run.end)}`;
    timeline.append(turn);
  }
  const cursor = document.createElement("div");
  cursor.className = "cursor";
  timeline.append(cursor);
  timeline.onclick = (event) => {
    const box = timeline.getBoundingClientRect();
    seek(duration * (event.clientX - box.left) / box.width);
  };
  for (const [label, colour] of colours) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour;
    item.append(swatch, document.createTextNode(label));
    legend.append(item);
  }
}

function drawSegments(doc, colours) {
  const box = $("segments");
  box.replaceChildren();
  state.words = [];
  for (const segment of doc.segments) {
    const row = document.createElement("div");
    row.className = "segment";
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = `${formatTime(segment.start)} – ${formatTime(segment.end)}`;
    const text = document.createElement("span");
    if (segment.speaker) {
      const speaker = document.createElement("span");
      speaker.className = "speaker";
      speaker.style.color = colours.get(segment.speaker);
      speaker.textContent = segment.speaker;
      text.append(speaker);
    }
    const words = segment.words || [];
    if (words.length) {
      // languages written without spaces (zh, ja) join their words directly
      const joiner = segment.text.includes(" ") ? " " : "";
      words.forEach((word, index) => {
        if (index) text.append(document.createTextNode(joiner));
        const span = document.createElement("span");
        span.className = "word";
        span.textContent = word.text;
        if (word.start !== null && word.start !== undefined) {
          span.dataset.start = word.start;
          span.dataset.end = word.end;
          span.onclick = () => seek(word.start);
          state.words.push({ span, start: word.start, end: word.end });
        }
        text.append(span);
      });
    } else {
      text.append(document.createTextNode(segment.text));
    }
    row.append(time, text);
    box.append(row);
  }
}

function seek(seconds) {
  const player = $("player");
  if (!player.src) return;
  player.currentTime = seconds;
  player.play().catch(() => { /* autoplay may be refused; the position is set */ });
}

function highlight() {
  const now = $("player").currentTime;
  for (const word of state.words) word.span.classList.toggle("active", word.start <= now && now < word.end);
  const cursor = document.querySelector("#timeline .cursor");
  if (cursor && state.document) cursor.style.left = (100 * now / Math.max(state.document.duration, 1e-6)) + "%";
}

function animate() {
  highlight();
  if (!$("player").paused) requestAnimationFrame(animate);
}

// --- downloads: rendered by the server's own writers, the same as `onespeech transcribe -f` ---

async function prepareDownloads(documentText) {
  for (const url of state.downloads) URL.revokeObjectURL(url);
  state.downloads = [];
  const stem = "transcript";
  for (const format of FORMATS) {
    const link = $("download-" + format);
    link.removeAttribute("href");
    const answer = await fetch("v1/documents/render?format=" + format, {
      method: "POST", headers: { "Content-Type": "application/json", ...headers() }, body: documentText,
    });
    const body = await answer.text();
    if (!answer.ok) {
      setStatus(errorText(answer.status, body), true);
      continue;
    }
    const url = URL.createObjectURL(new Blob([body], { type: "text/plain;charset=utf-8" }));
    state.downloads.push(url);
    link.href = url;
    link.download = `${stem}.${format}`;
  }
}

// --- the microphone: PCM frames over the WebSocket, finals as they come ---

async function startLive() {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    setStatus("this browser gives no microphone access to this page (it needs https or localhost)", true);
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    setStatus("no microphone: " + error.message, true);
    return;
  }
  const context = new AudioContext();
  const source = context.createMediaStreamSource(stream);
  const processor = context.createScriptProcessor(4096, 1, 1);
  const query = new URLSearchParams({ sample_rate: String(context.sampleRate), encoding: "pcm_f32le" });
  const language = $("language").value.trim();
  if (language) query.set("language", language);
  if (apiKey()) query.set("api_key", apiKey()); // a browser WebSocket cannot send headers
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}${location.pathname.replace(/[^/]*$/, "")}v1/audio/stream?${query}`);
  socket.binaryType = "arraybuffer";
  state.live = { stream, context, source, processor, socket };
  $("live").hidden = false;
  $("finals").replaceChildren();
  $("record").textContent = "Stop";
  setStatus("listening…");
  processor.onaudioprocess = (event) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(event.inputBuffer.getChannelData(0).slice().buffer);
  };
  socket.onopen = () => {
    source.connect(processor);
    processor.connect(context.destination);
  };
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "final") addFinal(message);
    else if (message.type === "error") setStatus(message.error.message, true);
    else if (message.type === "done") setStatus(`live session done (${formatTime(message.duration)})`);
  };
  socket.onclose = () => stopCapture();
}

function addFinal(final) {
  const row = document.createElement("div");
  row.className = "final";
  row.textContent = `${formatTime(final.start)} – ${formatTime(final.end)}  ${final.text}`;
  $("finals").append(row);
}

function stopCapture() {
  const live = state.live;
  if (!live) return;
  live.processor.disconnect();
  live.source.disconnect();
  for (const track of live.stream.getTracks()) track.stop();
  live.context.close();
  $("record").textContent = "Record from the microphone";
}

function stopLive() {
  const live = state.live;
  if (!live) return;
  stopCapture();
  if (live.socket.readyState === WebSocket.OPEN) live.socket.send(JSON.stringify({ type: "finish" }));
  state.live = null;
}

// --- wiring ---

function init() {
  const stored = sessionStorage.getItem("onespeech-api-key");
  if (stored) $("api-key").value = stored;
  $("api-key").addEventListener("change", () => {
    sessionStorage.setItem("onespeech-api-key", apiKey());
    loadModel();
  });
  $("file").addEventListener("change", (event) => {
    if (event.target.files.length) transcribeFile(event.target.files[0]);
  });
  const drop = $("drop");
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files.length) transcribeFile(event.dataTransfer.files[0]);
  });
  $("record").addEventListener("click", () => (state.live ? stopLive() : startLive()));
  const player = $("player");
  player.addEventListener("play", () => requestAnimationFrame(animate));
  player.addEventListener("timeupdate", highlight);
  player.addEventListener("seeked", highlight);
  loadModel();
}

init();
