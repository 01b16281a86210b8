// omni-agent browser client: plain JS, no build step.
// Speaks the wire protocol (docs/architecture.md, README) over one WebSocket; media over WebRTC.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
// ?raw=1 turns off the browser's echo cancellation and friends (for measuring).
const RAW = params.get("raw") === "1";
const VOICED = 0.02; // RMS level that counts as voice, for the client's own latency figure

const omni = (window.omni = {
  states: [], messages: [], messageTimes: [], remotePeak: 0, remoteVoicedBlocks: 0, v2v: [], v2vTurns: [],
  connected: false, micStartedAt: null,
  opened: [], // every capture track the page opened: tests check none is left live
});

let ws = null, pc = null, micStream = null, camStream = null, videoSender = null;
let audioCtx = null, meters = [], lastVoicedAt = 0, awaitingReply = false;
let turnNodes = new Map(), lastUserTurn = null;

function setState(state, text) {
  const el = $("state");
  el.dataset.state = state;
  el.textContent = text || { listening: "Listening", thinking: "Thinking…", speaking: "Speaking", idle: "Not connected" }[state] || state;
  omni.states.push(state);
}

function showError(text) {
  const el = $("error");
  el.hidden = !text;
  el.textContent = text || "";
}

function setConnected(on) {
  omni.connected = on;
  $("connect").textContent = on ? "Hang up" : "Connect";
  $("connect").classList.toggle("primary", !on);
  for (const id of ["mic", "interrupt", "text"]) $(id).disabled = !on;
  $("say").querySelector("button").disabled = !on;
  $("profile").disabled = on;
  $("target-lang").disabled = on;
  $("camera").disabled = false;
}

function addLine(role, text, { turn = null, final = true } = {}) {
  const key = turn === null ? null : `${role}:${turn}`;
  let li = key && turnNodes.get(key);
  if (!li) {
    li = document.createElement("li");
    li.className = role;
    $("transcript").appendChild(li);
    if (key) turnNodes.set(key, li);
  }
  li.textContent = text;
  li.classList.toggle("partial", !final);
  li.scrollIntoView({ block: "nearest" });
}

// ---- profiles: the car panel and the interpretation captions ----

const LANGS = { en: "English", es: "Spanish", ca: "Catalan", gl: "Galician" };

function showProfile(profile) {
  $("car").hidden = profile !== "in_car";
  $("captions").hidden = profile !== "translate";
}

function carValue(state, key) {
  if (key === "defrost") {
    const c = state.climate;
    return [c.defrost_front && "front", c.defrost_rear && "rear"].filter(Boolean).join(" + ") || "off";
  }
  if (key === "media") return `${state.media.playing ? "playing" : "paused"} · ${state.media.source}`;
  const v = key.split(".").reduce((o, k) => (o == null ? o : o[k]), state);
  if (key.startsWith("windows.") || key === "sunroof") return v === 0 ? "closed" : `${v}% open`;
  if (key.startsWith("climate.temperature")) return `${v} °C`;
  if (key.startsWith("seat_heating.")) return v === 0 ? "off" : `level ${v}`;
  if (key === "climate.ac") return v ? "on" : "off";
  if (key === "doors_locked") return v ? "locked" : "unlocked";
  if (key === "destination") return v || "–";
  return String(v);
}

function showCar(state) {
  omni.car = state;
  for (const dd of document.querySelectorAll("#car [data-key]")) {
    const text = carValue(state, dd.dataset.key);
    dd.classList.toggle("changed", dd.textContent !== "–" && dd.textContent !== text);
    dd.textContent = text;
  }
}

function caption(msg) {
  const n = msg.segment;
  let row = document.querySelector(`#caption-rows tr[data-segment="${n}"]`);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.segment = n;
    row.innerHTML = "<td></td><td class='src'></td><td class='dst'></td><td class='at'></td>";
    row.cells[0].textContent = n;
    row.querySelector(".src").lang = "en";
    row.querySelector(".dst").lang = $("target-lang").value; // read aloud and hyphenated in its own language
    $("caption-rows").appendChild(row);
  }
  if (msg.role === "user") {
    row.querySelector(".src").textContent = msg.text;
    if (msg.end_ms != null) row.querySelector(".at").textContent = `${(msg.end_ms / 1000).toFixed(1)} s`;
  } else {
    row.querySelector(".dst").textContent = msg.text;
  }
  if (msg.notice) { $("caption-notice").hidden = false; $("caption-notice").textContent = msg.notice; }
}

// ---- a small live chart of the recent turns ----

const recentTurns = [];

function drawChart() {
  const canvas = $("chart");
  canvas.width = canvas.clientWidth || 200; // draw at the size shown: crisp text
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  if (!recentTurns.length) return;
  const total = (t) => (t.endpoint_ms || 0) + (t.first_audio_ms || 0);
  const max = Math.max(500, ...recentTurns.map(total));
  const bw = w / 20;
  recentTurns.forEach((t, i) => {
    const x = i * bw + 1;
    const e = ((t.endpoint_ms || 0) / max) * (h - 12);
    const a = ((t.first_audio_ms || 0) / max) * (h - 12);
    ctx.fillStyle = "#5b6b7a";
    ctx.fillRect(x, h - e, bw - 2, e);
    ctx.fillStyle = "#4da3ff";
    ctx.fillRect(x, h - e - a, bw - 2, a);
  });
  ctx.fillStyle = "#8b97a3";
  ctx.font = "10px system-ui";
  ctx.fillText(`${Math.round(max)} ms`, 2, 10);
}

function fmt(ms) { return ms === null || ms === undefined ? "–" : `${Math.round(ms)} ms`; }

// ---- levels: mic and agent audio, for the voice-to-voice figure ----

function meter(stream, onLevel) {
  audioCtx = audioCtx || new AudioContext();
  const src = audioCtx.createMediaStreamSource(stream);
  const an = audioCtx.createAnalyser();
  an.fftSize = 512;
  src.connect(an);
  const buf = new Float32Array(an.fftSize);
  const m = { an, buf, onLevel };
  meters.push(m);
  return m;
}

function pollMeters() {
  for (const m of meters) {
    m.an.getFloatTimeDomainData(m.buf);
    let sum = 0;
    for (const v of m.buf) sum += v * v;
    m.onLevel(Math.sqrt(sum / m.buf.length));
  }
  if (meters.length) requestAnimationFrame(pollMeters);
}

// The mic's noise floor, which falls at once and rises over some 20 s: in a car the road noise is above VOICED,
// so voice is what also stands, smoothed over ~50 ms, 6 dB above the floor (in a quiet room the floor stays
// near zero and the figure is what it was without one).
let micFloor = null, micSmooth = null;
function onMicLevel(level) {
  micSmooth = micSmooth === null ? level : 0.7 * micSmooth + 0.3 * level;
  micFloor = micFloor === null || micSmooth < micFloor ? micSmooth : micFloor + 0.001 * (micSmooth - micFloor);
  const voiced = level > VOICED && micSmooth > 2 * micFloor;
  if (voiced && micStream && micStream.getAudioTracks()[0].enabled) lastVoicedAt = performance.now();
}

function onRemoteLevel(level) {
  omni.remotePeak = Math.max(omni.remotePeak, level);
  if (level > VOICED) {
    omni.remoteVoicedBlocks += 1;
    if (awaitingReply && lastVoicedAt) {
      const v2v = performance.now() - lastVoicedAt;
      awaitingReply = false;
      omni.v2v.push(v2v);
      omni.v2vTurns.push(lastUserTurn); // which turn the figure is of: the user's last finished one
      $("m-v2v").textContent = fmt(v2v);
      send({ type: "client_metrics", voice_to_voice_ms: Math.round(v2v) });
    }
  }
}

// ---- signalling ----

function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
}

function onMessage(ev) {
  let msg;
  try { msg = JSON.parse(ev.data); } catch { return; }
  omni.messages.push(msg);
  omni.messageTimes.push(performance.now());
  switch (msg.type) {
    case "answer":
      $("engine").textContent = `engine ${msg.engine} · profile ${msg.profile}`;
      showProfile(msg.profile);
      pc.setRemoteDescription({ type: "answer", sdp: msg.sdp }).catch((e) => showError(`Could not connect: ${e}`));
      break;
    case "state":
      // the reply is awaited until it is heard: "listening" can come before the page plays the last of it
      if (msg.state === "thinking") awaitingReply = true;
      setState(msg.state);
      break;
    case "transcript":
      addLine(msg.role, msg.text, { turn: msg.turn, final: msg.final });
      if (msg.role === "user" && msg.final) lastUserTurn = msg.turn;
      if (msg.segment != null && msg.final) caption(msg);
      break;
    case "metrics":
      $("m-endpoint").textContent = fmt(msg.endpoint_ms);
      $("m-text").textContent = fmt(msg.first_text_ms);
      $("m-audio").textContent = fmt(msg.first_audio_ms);
      recentTurns.push(msg);
      if (recentTurns.length > 20) recentTurns.shift();
      omni.chartTurns = recentTurns.length;
      drawChart();
      break;
    case "tool":
      if (msg.result && msg.result.state) showCar(msg.result.state);
      if (msg.name !== "get_vehicle_state") {
        const ok = msg.result && msg.result.ok;
        addLine("notice", `${ok ? "✓" : "✗"} ${msg.name}: ${msg.result ? msg.result.message : ""}`);
      }
      break;
    case "error":
      showError(`${msg.code}: ${msg.message}`);
      break;
  }
}

async function waitForCandidates(pc, timeoutMs = 3000) {
  if (pc.iceGatheringState === "complete") return;
  await new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, timeoutMs);
  });
}

async function connect() {
  showError("");
  setState("idle", "Connecting…");
  try {
    micStream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: !RAW, noiseSuppression: !RAW, autoGainControl: !RAW },
    });
    omni.micStartedAt = performance.now(); // what the page's times are counted from, for tests and benchmarks
    omni.opened.push(...micStream.getTracks());
  } catch (e) {
    setState("idle");
    showError(`The microphone is needed: ${e.message || e}`);
    return;
  }
  // The server's ICE servers (STUN, TURN with its credentials) and policy, for a user behind a NAT.
  let ice;
  try {
    const token = params.get("token");
    const reply = await fetch(token ? `/ice?token=${encodeURIComponent(token)}` : "/ice");
    if (!reply.ok) throw new Error(`${reply.status} ${(await reply.text()).trim()}`);
    ice = await reply.json();
  } catch (e) {
    for (const t of micStream.getTracks()) t.stop();
    micStream = null;
    setState("idle");
    showError(`The server's connection settings could not be read: ${e.message || e}`);
    return;
  }
  omni.ice = ice;
  omni.iceErrors = [];
  pc = new RTCPeerConnection(ice);
  // A TURN server that refuses (a wrong or expired credential: 401) or cannot be reached says so here.
  pc.addEventListener("icecandidateerror", (e) => omni.iceErrors.push(`${e.url || "?"}: ${e.errorCode} ${e.errorText || ""}`.trim()));
  pc.addTrack(micStream.getAudioTracks()[0], micStream);
  // Always offer a video section, so the camera can come and go without renegotiating.
  videoSender = pc.addTransceiver("video", { direction: "sendonly" }).sender;
  if (camStream) await videoSender.replaceTrack(camStream.getVideoTracks()[0]);
  pc.ontrack = (ev) => {
    if (ev.track.kind !== "audio") return;
    const stream = ev.streams[0] || new MediaStream([ev.track]);
    $("remote").srcObject = stream;
    meter(stream, onRemoteLevel);
    if (meters.length === 2) requestAnimationFrame(pollMeters);
  };
  pc.onconnectionstatechange = () => {
    if (pc && (pc.connectionState === "failed" || pc.connectionState === "disconnected")) {
      showError(`Connection ${pc.connectionState}`);
    }
  };
  meter(micStream, onMicLevel);
  if (audioCtx.state === "suspended") audioCtx.resume();
  await pc.setLocalDescription(await pc.createOffer());
  await waitForCandidates(pc);
  if (!/^a=candidate:/m.test(pc.localDescription.sdp)) {
    const why = omni.iceErrors.length ? ` (${omni.iceErrors.join("; ")})` : "";
    hangUp();
    showError(`No way to reach the server was found${why}`);
    return;
  }

  ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.onmessage = onMessage;
  ws.onclose = () => { if (omni.connected) hangUp(); };
  ws.onerror = () => showError("The server cannot be reached");
  ws.onopen = () => {
    const msg = { type: "offer", sdp: pc.localDescription.sdp, profile: $("profile").value };
    // The server cancels the agent's voice itself unless the browser's canceller is on (not with ?raw).
    const mic = micStream.getAudioTracks()[0].getSettings();
    msg.echo_cancelled = !RAW && mic.echoCancellation !== false;
    if (msg.profile === "translate") { msg.source_lang = "en"; msg.target_lang = $("target-lang").value; }
    if (params.get("token")) msg.token = params.get("token");
    send(msg);
  };
  setConnected(true);
}

function hangUp() {
  send({ type: "bye" });
  if (ws) ws.close();
  if (pc) pc.close();
  if (micStream) micStream.getTracks().forEach((t) => t.stop());
  ws = pc = micStream = videoSender = null;
  meters = [];
  micFloor = micSmooth = null;
  stopCamera(); // the camera's light goes off with the call
  showMic(true); // the next call starts with the mic on
  setConnected(false);
  setState("idle");
}

function showCamera(on) {
  $("preview").hidden = !on;
  $("stage").classList.toggle("with-video", on); // no empty column where the preview would be
  $("camera").setAttribute("aria-pressed", String(on));
  $("camera").textContent = on ? "Camera on" : "Camera off";
}

function stopCamera() {
  if (camStream) camStream.getTracks().forEach((t) => t.stop());
  camStream = null;
  $("preview").srcObject = null;
  showCamera(false);
}

async function toggleCamera() {
  if (camStream) {
    stopCamera();
    if (videoSender) await videoSender.replaceTrack(null);
    return;
  }
  try {
    // Only what the model uses: it samples about 2 frames a second.
    camStream = await navigator.mediaDevices.getUserMedia({
      video: { width: { ideal: 640 }, height: { ideal: 480 }, frameRate: { ideal: 5, max: 10 } },
    });
  } catch (e) {
    showError(`The camera could not be opened: ${e.message || e}`);
    return;
  }
  omni.opened.push(...camStream.getTracks());
  $("preview").srcObject = camStream;
  showCamera(true);
  if (videoSender) await videoSender.replaceTrack(camStream.getVideoTracks()[0]);
}

function showMic(on) {
  $("mic").setAttribute("aria-pressed", String(on));
  $("mic").textContent = on ? "Mic on" : "Mic off";
}

function toggleMic() {
  const track = micStream && micStream.getAudioTracks()[0];
  if (!track) return;
  track.enabled = !track.enabled; // a muted track still sends silence: the session stays alive
  showMic(track.enabled);
}

$("connect").onclick = () => (omni.connected ? hangUp() : connect());
$("profile").onchange = () => { $("lang-box").hidden = $("profile").value !== "translate"; };
$("target-lang").onchange = () => { $("cap-dst").textContent = LANGS[$("target-lang").value]; };
if (params.get("profile")) { $("profile").value = params.get("profile"); $("profile").onchange(); }
if (params.get("lang")) { $("target-lang").value = params.get("lang"); $("target-lang").onchange(); }
$("camera").onclick = toggleCamera;
$("mic").onclick = toggleMic;
$("interrupt").onclick = () => send({ type: "interrupt" });
$("say").onsubmit = (ev) => {
  ev.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  send({ type: "text", text });
  $("text").value = "";
};
$("camera").disabled = false;
setState("idle");
