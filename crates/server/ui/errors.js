// Collects the page's errors (uncaught, rejected promises, console.error,
// resources that failed to load) in window.hastenErrors, so the browser
// tests can assert there were none. Loaded first, as a classic script.
window.hastenErrors = [];
window.addEventListener("error", (e) => {
  const what = e.message || (e.target && (e.target.src || e.target.href)) || "error";
  window.hastenErrors.push(String(what));
}, true);
window.addEventListener("unhandledrejection", (e) => {
  window.hastenErrors.push("unhandled rejection: " + String(e.reason));
});
(() => {
  const orig = console.error.bind(console);
  console.error = (...args) => {
    window.hastenErrors.push(args.map(String).join(" "));
    orig(...args);
  };
})();
