/* nbrecall web UI: cell highlighting in the viewer, and the streamed answer panel on the search page.
   Plain JS, no dependencies; text from the server is only ever inserted as text, never as HTML. */
(function () {
  "use strict";

  // --- viewer: #cell-id=<id> (the JupyterLab link form) scrolls to the cell and highlights it -------------
  function cellFromHash() {
    var raw = location.hash ? location.hash.slice(1) : "";
    if (!raw) return null;
    var id = raw;
    try { id = decodeURIComponent(raw); } catch (e) { /* keep raw */ }
    var el = document.getElementById(id);
    return el && el.classList.contains("cell") ? el : null;
  }

  // A long notebook is shown a page of cells at a time: a #cell-id link to a cell on another page asks the
  // server for the page that holds it (the fragment never reaches the server by itself).
  function pageOfHash() {
    var cells = document.querySelector(".cells[data-nb]");
    if (!cells || cells.getAttribute("data-pages") === "1" || !location.hash) return false;
    var raw = location.hash.slice(1), id = raw;
    try { id = decodeURIComponent(raw); } catch (e) { /* keep raw */ }
    if (id.indexOf("cell-id=") !== 0) return false;
    var wanted = id.slice("cell-id=".length);
    var params = new URLSearchParams(location.search);
    if (params.get("cell") === wanted) return false;  // asked already: the id is not in this notebook
    var sha = cells.getAttribute("data-nb");
    if (!SHA.test(sha)) return false;
    location.replace("/nb/" + sha + "?cell=" + encodeURIComponent(wanted) + location.hash);
    return true;
  }

  function highlightFromHash() {
    var el = cellFromHash();
    if (!el) { pageOfHash(); return; }
    var old = document.querySelectorAll(".cell.highlight");
    for (var i = 0; i < old.length; i++) old[i].classList.remove("highlight");
    el.classList.add("highlight");
    el.scrollIntoView({ block: "start" });
  }

  // --- search page: stream /api/ask as server-sent events over fetch --------------------------------------
  var SHA = /^[0-9a-f]{64}$/;

  function citationLink(c) {
    var a = document.createElement("a");
    var label = "[" + c.notebook + " \u203a Cell " + c.cell + "]";
    a.textContent = label;
    if (c.nb_sha && SHA.test(c.nb_sha)) {
      a.href = "/nb/" + c.nb_sha + "#cell-id=" + encodeURIComponent(c.cell_id || "");
    }
    return { el: a, label: label };
  }

  function linkify(target, text, citations) {
    target.textContent = "";
    var rest = text;
    while (rest.length) {
      var best = -1, found = null;
      for (var i = 0; i < citations.length; i++) {
        var at = rest.indexOf(citations[i].label);
        if (at >= 0 && (best < 0 || at < best)) { best = at; found = citations[i]; }
      }
      if (!found) { target.appendChild(document.createTextNode(rest)); break; }
      target.appendChild(document.createTextNode(rest.slice(0, best)));
      target.appendChild(citationLink(found.data).el);
      rest = rest.slice(best + found.label.length);
    }
  }

  function setupAsk() {
    var button = document.getElementById("ask-button");
    var form = document.querySelector("form.search");
    if (!button || !form) return;
    var textEl = document.getElementById("answer-text");
    var noticeEl = document.getElementById("answer-notice");
    var listEl = document.getElementById("answer-citations");
    var valuesEl = document.getElementById("answer-values");

    // The best value, the values beside it in its own cell when it is uncertain (`beside`), and the alternatives
    // ("also found"), one row each, linked to their cells; the best one with the answer's estimate that it is the
    // value asked for (`confidence`).
    function showValues(values, confidence, beside) {
      if (!valuesEl) return;
      var body = valuesEl.querySelector("tbody");
      body.textContent = "";
      valuesEl.hidden = !values || !values.length;
      var best = typeof confidence === "number" ? "best · est. " + Math.round(confidence * 100) + "% right" : "best";
      var rows = (values || []).slice(0, 1).map(function (v) { return [best, v]; })
        .concat((beside || []).map(function (v) { return ["beside it", v]; }))
        .concat((values || []).slice(1).map(function (v) { return ["also found", v]; }));
      rows.forEach(function (row) {
        var v = row[1];
        var tr = document.createElement("tr");
        // a symbol's label (`Ku`) with what the notebook says it is, when it says
        var label = v.meaning ? v.label + " — " + v.meaning : v.label;
        var cells = [row[0], v.value, label, null, v.year ? String(v.year) : ""];
        cells.forEach(function (content, j) {
          var td = document.createElement("td");
          if (j === 1) td.className = "value";
          if (content === null) {
            td.appendChild(citationLink({ notebook: v.notebook, cell: v.cell, cell_id: v.cell_id,
                                          nb_sha: v.nb_sha }).el);
          } else {
            td.textContent = content;
          }
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
    }

    function notice(msg) { noticeEl.hidden = false; noticeEl.textContent = msg; }

    button.addEventListener("click", function () {
      var params = new URLSearchParams();
      var data = new FormData(form);
      ["q", "year", "project", "author", "tag", "include_deprecated"].forEach(function (key) {
        var v = data.get(key);
        if (v) params.set(key, v);
      });
      textEl.textContent = "";
      listEl.textContent = "";
      showValues([]);
      noticeEl.hidden = true;
      button.disabled = true;
      textEl.classList.add("streaming");
      var text = "", cited = [];

      function addCitation(c) {
        var link = citationLink(c);
        if (cited.some(function (x) { return x.label === link.label; })) return;
        cited.push({ label: link.label, data: c });
        var li = document.createElement("li");
        li.appendChild(link.el);
        listEl.appendChild(li);
      }

      function handle(event) {
        if (event.type === "token") { text += event.text || ""; textEl.textContent = text; }
        else if (event.type === "notice") { notice(event.text || ""); }
        else if (event.type === "citation" && event.citation) { addCitation(event.citation); }
        else if (event.type === "done") {
          if (event.answer) {
            if (!text) text = event.answer.text || "";
            (event.answer.citations || []).forEach(addCitation);
            showValues(event.answer.values, event.answer.confidence, event.answer.beside);
            if (event.answer.notice) notice(event.answer.notice);
          }
          linkify(textEl, text, cited);
        }
      }

      fetch("/api/ask?" + params.toString(), { headers: { Accept: "text/event-stream" } })
        .then(function (response) {
          if (!response.ok) {
            return response.json().then(function (body) {
              notice(typeof body.detail === "string" ? body.detail : "answer failed (" + response.status + ")");
            }, function () { notice("answer failed (" + response.status + ")"); });
          }
          var reader = response.body.getReader();
          var decoder = new TextDecoder();
          var buffer = "";
          function pump() {
            return reader.read().then(function (chunk) {
              buffer += decoder.decode(chunk.value || new Uint8Array(), { stream: !chunk.done });
              var parts = buffer.split("\n\n");
              buffer = chunk.done ? "" : parts.pop();
              parts.forEach(function (part) {
                var lines = part.split("\n").filter(function (l) { return l.indexOf("data:") === 0; });
                if (!lines.length) return;
                try { handle(JSON.parse(lines.map(function (l) { return l.slice(5); }).join("\n"))); }
                catch (e) { /* ignore a malformed event */ }
              });
              if (!chunk.done) return pump();
            });
          }
          return pump();
        })
        .catch(function () { notice("the answer stream was interrupted"); })
        .then(function () { button.disabled = false; textEl.classList.remove("streaming"); });
    });
  }

  // --- search page of `serve ROOT`: the background indexing's progress, refreshed from /api/progress --------
  function setupProgress() {
    var section = document.getElementById("progress");
    if (!section) return;
    var bar = document.getElementById("progress-bar");
    var list = document.getElementById("progress-lines");
    function show(data) {
      var live = data.live || {};
      section.setAttribute("data-busy", live.busy ? "true" : "false");
      section.setAttribute("data-state", live.state || "");
      list.textContent = "";
      (data.lines || []).forEach(function (line) {
        var li = document.createElement("li");
        li.textContent = line;
        list.appendChild(li);
      });
      bar.hidden = !live.busy;
      if (typeof data.fraction === "number") bar.value = data.fraction; else bar.removeAttribute("value");
      return live.busy;
    }
    function poll() {
      fetch("/api/progress", { headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (data) { setTimeout(poll, data && show(data) ? 1000 : 5000); },
              function () { setTimeout(poll, 5000); });
    }
    setTimeout(poll, section.getAttribute("data-busy") === "true" ? 1000 : 5000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    highlightFromHash();
    setupAsk();
    setupProgress();
  });
  // Images above the cell may change the layout once decoded: settle the scroll again after load.
  window.addEventListener("load", function () { if (cellFromHash()) highlightFromHash(); });
  window.addEventListener("hashchange", highlightFromHash);
})();
