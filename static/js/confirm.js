// A form with data-confirm="question" asks before it is sent (an inline onsubmit would be
// refused by the Content-Security-Policy, which allows scripts from 'self' only).
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) { event.preventDefault(); }
}, true);
