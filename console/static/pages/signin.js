// Sign-in: an API token typed into the form, or the code of a one-time link
// (fleetmux ui) read from the URL's fragment, sent as a form POST; the server
// answers with a session cookie the page never sees. The token is kept nowhere.

import { el, APIError } from '../app.js';

async function post(fields) {
  const res = await fetch('/ui/signin', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { Accept: 'application/json' },
    body: new URLSearchParams(fields),
  });
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

export function signinPage(main, { signedIn }) {
  const msg = el('p', { class: 'error', id: 'signin-error' });
  const token = el('input', { type: 'password', name: 'token', id: 'token', autocomplete: 'off', required: true, placeholder: 'API token' });
  const form = el('form', { class: 'signin', method: 'post', action: '/ui/signin', id: 'signin' },
    el('h1', {}, 'Sign in to fleetmux'),
    el('label', { for: 'token' }, 'API token (fleetmux token create, or the dev token)'),
    token,
    el('button', { type: 'submit' }, 'Sign in'),
    el('p', { class: 'muted' }, 'Or run ', el('code', {}, 'fleetmux ui'), ' for a one-time link.'),
    msg);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    msg.textContent = '';
    const t = token.value;
    token.value = '';
    try {
      signedIn(await post({ token: t }));
    } catch (err) {
      msg.textContent = err.message;
    }
  });
  main.append(form);

  const code = new URLSearchParams(location.hash.slice(1)).get('code');
  if (code) {
    history.replaceState(null, '', '/ui/signin'); // the code works once: drop it from the address bar
    post({ code }).then(signedIn, (err) => { msg.textContent = err.message; });
  }
}
