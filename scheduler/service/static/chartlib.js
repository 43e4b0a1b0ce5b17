// Chart.js (static/chart.umd.min.js, MIT), loaded once for every chart of the page: the usage
// history and the job details' live GPU chart. The hub's page loads RequireJS, and a UMD file
// under RequireJS registers itself as an anonymous AMD module instead of setting
// window.Chart: load it through RequireJS then.

import { el } from "./common.js";

let loading = null;

export function loadChart() {
  loading ??= new Promise((resolve, reject) => {
    const src = document.getElementById("frachub").dataset.chartSrc;
    if (window.Chart) {
      resolve(window.Chart);
    } else if (typeof window.define === "function" && window.define.amd && window.require) {
      window.require([src], resolve, reject);
    } else {
      const script = el("script", { src });
      script.addEventListener("load", () => resolve(window.Chart));
      script.addEventListener("error", () => reject(new Error(`cannot load ${src}`)));
      document.head.append(script);
    }
  }).then((loaded) => {
    window.Chart ??= loaded; // for the browser tests and the console: Chart.getChart(canvas)
    return loaded;
  });
  return loading;
}
