// The ops view runs inside Airflow's plugin iframe, whose sandbox has no allow-top-navigation:
// a target="_top" link cannot navigate the window Airflow runs in, and following it inside the
// frame would nest a second Airflow in the first. Airflow's UI is a single-page app served from
// the same origin (the sandbox allows same-origin scripts), so a click on a link to one of
// Airflow's own pages is handed to Airflow's router: its history gets the URL and a popstate,
// exactly what the browser's back and forward buttons give it. Outside a frame the link works as
// it is.
"use strict";
document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
    return;
  }
  const link = event.target instanceof Element ? event.target.closest('a[target="_top"]') : null;
  if (link === null || window.top === window) {
    return;
  }
  let top;
  try {
    top = window.top;
    if (top.location.origin !== window.location.origin) {
      return;
    }
  } catch (error) {
    return; // another origin: leave it to the browser
  }
  const url = new URL(link.href, window.location.href);
  if (url.origin !== window.location.origin) {
    return;
  }
  event.preventDefault();
  const state = top.history.state || {};
  const idx = typeof state.idx === "number" ? state.idx + 1 : 0;
  const key = Math.random().toString(36).slice(2, 10);
  top.history.pushState({ usr: null, key: key, idx: idx }, "", url.pathname + url.search + url.hash);
  top.dispatchEvent(new PopStateEvent("popstate", { state: top.history.state }));
});
