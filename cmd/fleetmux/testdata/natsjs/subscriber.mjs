// A nats.js subscriber as a user would write one, with fleetmux dev's
// <data>/creds/subscriber.creds: the creds part authenticates, the PEM
// CERTIFICATE block appended to the same file is the CA the server's TLS
// certificate is verified against, and replies come to the subscriber's own
// inbox prefix, _INBOX.subscriber.<name>.
//
// usage: node subscriber.mjs URL CREDS NAME out SUBJECT
//          prints {"offset":N,"data":"<base64>"} per message, after {"ready":true};
//          stops when stdin closes
//        node subscriber.mjs URL CREDS NAME forbidden SUBJECT REQUEST_SUBJECT
//          subscribes to SUBJECT and requests REQUEST_SUBJECT, prints what
//          nats.js reports for each ({"sub_error":…}, {"request_error":…},
//          {"status":…}), then {"done":true}
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator } from "nats";

const [url, credsFile, name, mode, subject, requestSubject] = process.argv.slice(2);
const creds = readFileSync(credsFile);
const ca = creds.toString("latin1").match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g);
if (!ca) {
  throw new Error(`${credsFile}: no CERTIFICATE block`);
}
const print = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const nc = await connect({
  servers: url,
  authenticator: credsAuthenticator(creds),
  tls: { ca },
  inboxPrefix: `_INBOX.subscriber.${name}`,
  name: "natsjs-subscriber",
  reconnect: false,
});
(async () => {
  for await (const s of nc.status()) {
    print({ status: { type: s.type, data: String(s.data), permissionContext: s.permissionContext } });
  }
})();

const describe = (err) => ({ code: err.code, message: err.message, permissionContext: err.permissionContext });

if (mode === "out") {
  nc.subscribe(subject, {
    callback: (err, m) => {
      if (err) {
        print({ sub_error: describe(err) });
        return;
      }
      print({ offset: Number(m.headers?.get("Fleetmux-Offset") ?? -1), data: Buffer.from(m.data).toString("base64") });
    },
  });
  await nc.flush();
  print({ ready: true });
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.on("end", resolve));
} else if (mode === "forbidden") {
  const subErr = new Promise((resolve) => {
    nc.subscribe(subject, { callback: (err) => err && resolve(err) });
  });
  await nc.flush();
  print({ sub_error: describe(await subErr) });
  try {
    const m = await nc.request(requestSubject, new TextEncoder().encode('{"session":"s1"}'), { timeout: 5000 });
    print({ reply: Buffer.from(m.data).toString() });
  } catch (err) {
    print({ request_error: describe(err) });
  }
  print({ done: true });
} else {
  throw new Error(`unknown mode ${mode}`);
}
await nc.drain();
