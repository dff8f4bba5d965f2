// Layout for small screens and the keyboard (a file: the Content-Security-Policy allows
// scripts from 'self' only).
// - The Menu button folds and unfolds the navigation on a phone (Escape folds it again).
// - Filters (details[data-open-wide]) start open on a wide screen, folded on a phone.
// - A table too wide for its card scrolls sideways: its wrapper becomes focusable, so the
//   keyboard can scroll it too, and is named after the table's heading.
(function () {
  var WIDE = "(min-width: 761px)";
  var bar = document.querySelector(".topbar");
  var toggle = document.querySelector(".nav-toggle");
  if (bar && toggle) {
    var set = function (open) {
      bar.classList.toggle("nav-open", open);
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
    };
    toggle.addEventListener("click", function () {
      set(toggle.getAttribute("aria-expanded") !== "true");
    });
    document.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && toggle.getAttribute("aria-expanded") === "true") {
        set(false);
        toggle.focus();
      }
    });
  }
  if (window.matchMedia(WIDE).matches) {
    document.querySelectorAll("details[data-open-wide]").forEach(function (d) { d.open = true; });
  }
  var label = function (wrap) {
    var heading = wrap.closest("section, .card, main");
    heading = heading && heading.querySelector("h1, h2, h3");
    return heading ? heading.textContent.trim() : "Table";
  };
  var mark = function () {
    document.querySelectorAll(".table-wrap").forEach(function (wrap) {
      if (wrap.scrollWidth > wrap.clientWidth + 1) {
        if (!wrap.hasAttribute("tabindex")) {
          wrap.setAttribute("tabindex", "0");
          wrap.setAttribute("role", "region");
          wrap.setAttribute("aria-label", label(wrap) + " (scrolls sideways)");
        }
      }
    });
  };
  mark();
  window.addEventListener("resize", mark);
  document.body.addEventListener("htmx:afterSettle", mark);
})();
