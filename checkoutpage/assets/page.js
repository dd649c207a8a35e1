// The hosted checkout page: countdown, copy, browser-wallet payment
// (EIP-1193), a pasted transaction hash, and the live state from the
// server's event stream (the checkout token is the credential).
(function () {
  "use strict";
  var root = document.getElementById("checkout");
  if (!root) return;
  var d = root.dataset;
  var token = d.token;
  var $ = function (sel) { return root.querySelector(sel); };
  var msgs = {};
  var tpl = $("template[data-messages]");
  if (tpl) {
    tpl.content.querySelectorAll("[data-for]").forEach(function (p) { msgs[p.dataset.for] = p.textContent; });
  }
  var errorEl = $("[data-error]");
  var walletBtn = $('[data-action="pay-with-wallet"]');
  var form = $('[data-form="submit-hash"]');
  var input = form && form.querySelector('input[name="transactionHash"]');

  function showError(text) {
    errorEl.textContent = text || "";
    errorEl.hidden = !text;
  }

  function setState(c) {
    if (!c || !c.status) return;
    root.dataset.status = c.status;
    var m = $("[data-message]");
    if (msgs[c.status]) m.textContent = msgs[c.status];
    if (c.transactionHash) {
      $("[data-tx-hash]").textContent = c.transactionHash;
      $("[data-tx]").hidden = false;
    }
    // A partial payment: what remains, and the way to pay it, stay shown.
    var rest = $("[data-remaining-line]");
    if (c.remaining) {
      root.dataset.remaining = c.remaining;
      root.dataset.remainingAtomic = c.remainingAtomic;
      $("[data-remaining-amount]").textContent = c.remaining;
      rest.hidden = false;
    } else {
      delete root.dataset.remaining;
      delete root.dataset.remainingAtomic;
      rest.hidden = true;
    }
    // The wallet link and its QR code ask for what is to pay now: the
    // remainder after a partial payment (the server's paymentUri).
    var link = $("[data-payment-uri]");
    if (c.paymentUri && link && link.dataset.paymentUri !== c.paymentUri) {
      link.dataset.paymentUri = c.paymentUri;
      link.setAttribute("href", c.paymentUri);
      var img = $("[data-qr]");
      img.src = "/checkout/" + encodeURIComponent(token) + "/qr.png?v=" + encodeURIComponent(c.version);
      img.alt = "QR code of the payment request for " + (c.remaining || c.amount) + " " + c.currency;
    }
    $("[data-late]").hidden = !c.late;
    if (c.status !== "awaiting_payment" && !c.remaining) stopCountdown();
  }

  // Countdown: a display timer only; the state comes from the server.
  var expires = Date.parse(d.expiresAt);
  var cd = $("[data-countdown]");
  var timer = null;
  function tick() {
    var ms = expires - Date.now();
    var left = Math.max(0, Math.ceil(ms / 1000));
    var m = Math.floor(left / 60), s = left % 60;
    cd.textContent = m + ":" + (s < 10 ? "0" : "") + s;
    if (ms <= 0 && root.dataset.status === "awaiting_payment") {
      setState({ status: "expired" });
    }
  }
  function stopCountdown() { if (timer) { clearInterval(timer); timer = null; } }
  if (cd && !isNaN(expires) && d.status === "awaiting_payment") { tick(); timer = setInterval(tick, 1000); }

  var copyBtn = $('[data-action="copy-address"]');
  if (copyBtn) {
    copyBtn.addEventListener("click", function () {
      var addr = $("[data-address]");
      var done = function () { copyBtn.textContent = "Copied"; setTimeout(function () { copyBtn.textContent = "Copy"; }, 2000); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(addr.value).then(done, function () { addr.select(); });
      } else { addr.select(); }
    });
  }

  function submitHash(hash) {
    showError("");
    return fetch("/api/v1/checkout/" + encodeURIComponent(token) + "/submit-payment", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ transactionHash: hash })
    }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) {
          var why = body && body.details && body.details.length
            ? body.details.map(function (x) { return x.field + " " + x.reason; }).join("; ")
            : (body && body.message) || "The hash was not accepted.";
          throw new Error(why);
        }
        setState(body);
      });
    }).catch(function (e) { showError(e.message); });
  }

  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var h = input.value.trim();
      if (!h) { showError("Paste the transaction hash first."); input.focus(); return; }
      submitHash(h);
    });
  }

  // Pay with a browser wallet (EIP-1193), EVM networks only.
  function pad32(hex) { return ("0".repeat(64) + hex).slice(-64); }
  function payWithWallet() {
    var eth = window.ethereum;
    var want = "0x" + BigInt(d.chainId).toString(16);
    // What is to pay now: the remainder after a partial payment.
    var due = d.remainingAtomic || d.amountAtomic;
    var atomic = "0x" + BigInt(due).toString(16);
    var payee = $("[data-address]").value;
    var from;
    showError("");
    walletBtn.disabled = true;
    return eth.request({ method: "eth_requestAccounts" }).then(function (accounts) {
      if (!accounts || !accounts.length) throw new Error("The wallet shared no account.");
      from = accounts[0];
      return eth.request({ method: "eth_chainId" });
    }).then(function (id) {
      if (BigInt(id) === BigInt(want)) return;
      return eth.request({ method: "wallet_switchEthereumChain", params: [{ chainId: want }] }).then(function () {
        return eth.request({ method: "eth_chainId" });
      }).then(function (id2) {
        if (BigInt(id2) !== BigInt(want)) throw new Error("Switch your wallet to " + root.querySelector(".network strong").textContent + " and try again.");
      });
    }).then(function () {
      var tx = { from: from };
      if (d.native === "true") {
        tx.to = payee; tx.value = atomic;
      } else {
        tx.to = d.currencyAddress; tx.value = "0x0";
        tx.data = "0xa9059cbb" + pad32(payee.slice(2).toLowerCase()) + pad32(BigInt(due).toString(16));
      }
      return eth.request({ method: "eth_sendTransaction", params: [tx] });
    }).then(function (hash) {
      if (input) input.value = hash;
      return submitHash(hash);
    }).catch(function (e) {
      showError((e && e.message) ? e.message : "The wallet did not send the payment.");
    }).then(function () { walletBtn.disabled = false; });
  }
  if (walletBtn && window.ethereum && typeof window.ethereum.request === "function" && d.networkType === "evm") {
    walletBtn.hidden = false;
    walletBtn.addEventListener("click", payWithWallet);
  }

  // Live state, pushed by the server.
  if (window.EventSource) {
    var es = new EventSource("/checkout/" + encodeURIComponent(token) + "/events");
    es.addEventListener("checkout", function (ev) {
      try { setState(JSON.parse(ev.data)); } catch (e) { /* ignore a malformed event */ }
    });
  }
})();
