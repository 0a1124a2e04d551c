/** The rollout dashboard page (spec §7.5): one static HTML file, no build step; it reads the admin API. */
import { readFileSync } from 'node:fs';

let html: string | undefined;

export function dashboardHtml(): string {
  html ??= readFileSync(new URL('./dashboard.html', import.meta.url), 'utf8');
  return html;
}
