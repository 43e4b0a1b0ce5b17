// Time ticks for the history charts, fitted to the window: seconds for a young service, hours
// for a day, days for a week. Chart.js's linear axis would put ticks at round numbers of
// milliseconds and label several of them with the same minute; these fall on round local
// times (hours from midnight, midnights for days) strictly after the axis's start, so within
// one window no two ticks read the same.

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

// the tick spacings tried, shortest first: the first that gives at most `most` ticks wins
const STEPS = [
  ...[1, 2, 5, 10, 15, 30].map((n) => n * SECOND),
  ...[1, 2, 5, 10, 15, 30].map((n) => n * MINUTE),
  ...[1, 2, 3, 6, 12].map((n) => n * HOUR),
  DAY,
  2 * DAY,
  7 * DAY,
];

function midnight(time) {
  const date = new Date(time);
  date.setHours(0, 0, 0, 0);
  return date.getTime();
}

// The spacing of the ticks for an axis from `min` to `max` (ms).
export function tickStep(min, max, most = 8) {
  const span = Math.max(max - min, SECOND);
  return STEPS.find((step) => span / step <= most) ?? STEPS[STEPS.length - 1];
}

// The tick values (ms) in (min, max]: multiples of the step counted from local midnight (for
// steps of a day or more, each local midnight, so a daylight-saving change moves none).
export function timeTicks(min, max, most = 8) {
  const step = tickStep(min, max, most);
  const ticks = [];
  if (step >= DAY) {
    const days = step / DAY;
    const date = new Date(midnight(min));
    while (date.getTime() <= min) date.setDate(date.getDate() + 1);
    for (; date.getTime() <= max; date.setDate(date.getDate() + days)) ticks.push(date.getTime());
    return { step, ticks };
  }
  const base = midnight(min);
  let tick = base + (Math.floor((min - base) / step) + 1) * step;
  for (; tick <= max; tick += step) ticks.push(tick);
  return { step, ticks };
}

function dayText(date) {
  return `${date.toLocaleDateString([], { weekday: "short" })} ${date.getDate()}`;
}

// A tick's label at the step's resolution: "Sat 28" for days and for midnight within a
// day, "14:00" for hours and minutes, "14:02:30" for seconds.
export function tickLabel(value, step) {
  const date = new Date(value);
  if (step >= DAY || value === midnight(value)) return dayText(date);
  const seconds = step < MINUTE ? { second: "2-digit" } : {};
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23", ...seconds });
}

// A moment in words for the page ("Sat 28 Nov, 14:02"): the year is left out.
export function momentText(value) {
  const date = new Date(value);
  const day = `${dayText(date)} ${date.toLocaleDateString([], { month: "short" })}`;
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  return `${day}, ${time}`;
}

// A bucket's width in words: "15 s", "5 min", "2 h".
export function spanText(ms) {
  if (ms < SECOND) return `${Math.max(0.1, Math.round(ms / 100) / 10)} s`;
  if (ms < MINUTE) return `${Math.round(ms / SECOND)} s`;
  if (ms < HOUR) return `${Math.round(ms / MINUTE)} min`;
  return `${Math.round((ms / HOUR) * 10) / 10} h`;
}
