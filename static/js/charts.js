// Draws each plotly chart of the page from the JSON beside it (div#ID and script#ID-data).
// A file, not an inline script: the Content-Security-Policy allows scripts from 'self' only.
document.querySelectorAll("div.chart").forEach(function (div) {
  var data = document.getElementById(div.id + "-data");
  if (!data) { return; }
  var fig = JSON.parse(data.textContent);
  Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
});
