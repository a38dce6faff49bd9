/* The inspector page, live: the conversation's event stream (SSE) names what changed, and
 * the page re-reads just those parts as server-rendered fragments (all escaping and
 * sanitizing stays on the server). Without the stream it polls the fragments every 2 s.
 * No build step, no dependencies. */
(function () {
  "use strict";

  var root = document.getElementById("inspector");
  if (!root) {
    return;
  }
  var fragmentsUrl = root.dataset.fragmentsUrl;
  var eventsUrl = root.dataset.eventsUrl;
  var submitUrl = root.dataset.submitUrl;
  var csrf = root.dataset.csrf;
  var kindParts = JSON.parse(root.dataset.kindParts || "{}");
  var ALL = Object.keys(kindParts);
  var POLL_MS = 2000;
  var ARTIFACTS_POLL_MS = 3000;
  var version = Number(root.dataset.version);
  var artifactsVersion = Number(root.dataset.artifactsVersion);
  // the roster's token: a stop or a resume moves it, and no conversation's version
  var roster = root.dataset.roster || "";
  var pending = new Set();
  var inflight = false;
  var pollTimer = null;
  var lastHtml = {};

  function setStatus(state, text) {
    var el = document.getElementById("live-status");
    if (el) {
      el.dataset.state = state;
      el.textContent = text || state;
    }
  }

  function apply(body) {
    version = body.version;
    root.dataset.version = String(version);
    if (typeof body.roster === "string") {
      roster = body.roster;
    }
    if (typeof body.artifacts_version === "number") {
      artifactsVersion = body.artifacts_version;
      root.dataset.artifactsVersion = String(artifactsVersion);
    }
    Object.keys(body.parts).forEach(function (name) {
      var html = body.parts[name];
      var el = document.getElementById("part-" + name);
      // unchanged parts are left alone (an artifact frame is not reloaded for nothing)
      if (el && lastHtml[name] !== html) {
        el.innerHTML = html;
        lastHtml[name] = html;
      }
    });
    root.dataset.refreshedAt = String(Date.now());
  }

  function fetchParts(query) {
    return fetch(fragmentsUrl + "?" + query, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    }).then(function (response) {
      if (response.status === 401) {
        setStatus("signed-out", "signed out: reload to log in");
        throw new Error("signed out");
      }
      if (response.status === 404) {
        setStatus("gone", "conversation gone");
        throw new Error("gone");
      }
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      return response.json();
    });
  }

  function refresh(parts) {
    parts.forEach(function (part) {
      pending.add(part);
    });
    if (inflight) {
      return;
    }
    inflight = true;
    var names = Array.from(pending);
    pending.clear();
    fetchParts("parts=" + encodeURIComponent(names.join(",")))
      .then(apply)
      .catch(function () {})
      .then(function () {
        inflight = false;
        if (pending.size) {
          refresh([]);
        }
      });
  }

  function partsFor(kinds) {
    var parts = new Set(["projection"]); // a project hook may read anything
    kinds.forEach(function (kind) {
      (kindParts[kind] || []).forEach(function (part) {
        parts.add(part);
      });
    });
    return Array.from(parts);
  }

  function pollOnce(query) {
    if (inflight) {
      return;
    }
    inflight = true;
    fetchParts(
      query +
        "&artifacts_since=" + encodeURIComponent(String(artifactsVersion)) +
        "&roster=" + encodeURIComponent(roster)
    )
      .then(apply)
      .catch(function () {})
      .then(function () {
        inflight = false;
        if (pending.size) {
          refresh([]); // a change that arrived meanwhile waited for this poll
        }
      });
  }

  function poll() {
    if (pollTimer !== null) {
      return;
    }
    setStatus("polling", "polling");
    pollTimer = window.setInterval(function () {
      pollOnce("since=" + encodeURIComponent(String(version)));
    }, POLL_MS);
  }

  function watchArtifacts() {
    // artifact changes do not move the conversation's version (nor its stream): a cheap poll
    // that answers the artifacts part only when the world's artifact sequence moved
    window.setInterval(function () {
      if (pollTimer === null) {
        pollOnce("parts=artifacts");
      }
    }, ARTIFACTS_POLL_MS);
  }

  function connect() {
    if (!window.EventSource || !eventsUrl) {
      poll();
      return;
    }
    var stream = new EventSource(eventsUrl);
    stream.addEventListener("open", function () {
      setStatus("live", "live");
    });
    stream.addEventListener("change", function (event) {
      var data = JSON.parse(event.data);
      var kinds = data.changed || [];
      if (!kinds.length) {
        // the stream's first event: what moved since the page was rendered
        if (data.version !== version) {
          kinds = ALL;
        } else if (data.roster === undefined || data.roster === roster) {
          return; // nothing
        } // else the roster only: the projection, which every refresh includes
      }
      refresh(partsFor(kinds));
    });
    stream.addEventListener("gone", function () {
      stream.close();
      setStatus("gone", "conversation gone");
    });
    stream.addEventListener("error", function () {
      if (stream.readyState === EventSource.CLOSED) {
        poll(); // the stream is not served here (or refused us): fall back to polling
      } else {
        setStatus("reconnecting", "reconnecting…");
      }
    });
  }

  function requestId() {
    if (window.crypto && window.crypto.randomUUID) {
      return window.crypto.randomUUID();
    }
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.from(bytes, function (b) {
      return b.toString(16).padStart(2, "0");
    }).join("");
  }

  function composer() {
    var form = document.getElementById("composer");
    var text = document.getElementById("composer-text");
    var send = document.getElementById("composer-send");
    var note = document.getElementById("composer-note");
    if (!form || !text || text.disabled) {
      return;
    }
    text.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    // the prompt being sent and its request id: sending the same text again after a failure
    // that may have reached the host (no answer) is the same submission, never a second one
    var attempt = null;
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var prompt = text.value;
      if (send.disabled || !prompt.trim()) {
        return; // one send at a time: Ctrl+Enter submits even while the button is disabled
      }
      if (attempt === null || attempt.text !== prompt) {
        attempt = { text: prompt, id: requestId() };
      }
      send.disabled = true;
      note.textContent = "sending…";
      fetch(submitUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json",
          "X-CSRFToken": csrf,
        },
        body: JSON.stringify({
          request_id: attempt.id,
          parts: [{ type: "text", text: prompt }],
        }),
      })
        .then(function (response) {
          return response
            .json()
            .catch(function () {
              return null;
            })
            .then(function (body) {
              if (response.ok) {
                attempt = null;
                text.value = "";
                note.textContent = "submitted #" + body.id;
                refresh(["transcript", "header"]);
              } else {
                var error = body && body.error ? body.error.message : "HTTP " + response.status;
                note.textContent = "not sent: " + error;
              }
            });
        })
        .catch(function () {
          note.textContent = "not sent: the host did not answer";
        })
        .then(function () {
          send.disabled = false;
        });
    });
  }

  composer();
  connect();
  watchArtifacts();
})();
