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
//        node subscriber.mjs URL CREDS NAME jetstream SUBJECT
//          the JetStream consumer as docs/operations.md shows it: asks a
//          controller for the consumer NAME on FLEETMUX_OUT filtered to SUBJECT,
//          pulls the first message from it ({"offset":N,"data":…}); then what
//          nats.js says of jetstreamManager() without and with checkAPI: false
//          ({"jsm":…}) and of an ordered consumer ({"ordered":…}), then
//          {"done":true}
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
} else if (mode === "jetstream") {
  const reply = await nc.request(`fleetmux.consumer.FLEETMUX_OUT.${name}.${subject}`,
    new TextEncoder().encode('{"ack_policy":"none"}'), { timeout: 5000 });
  print({ reply: Buffer.from(reply.data).toString() });
  const js = nc.jetstream();
  const c = await js.consumers.get("FLEETMUX_OUT", name);
  const m = await c.next({ expires: 5000 });
  print({ offset: Number(m?.headers?.get("Fleetmux-Offset") ?? -1), data: Buffer.from(m?.data ?? []).toString("base64") });
  for (const opts of [undefined, { checkAPI: false }]) {
    try {
      await nc.jetstreamManager(opts);
      print({ jsm: { opts, ok: true } });
    } catch (err) {
      print({ jsm: { opts, error: describe(err) } });
    }
  }
  try {
    const oc = await js.consumers.get("FLEETMUX_OUT");
    const om = await Promise.race([oc.next({ expires: 2000 }), new Promise((r) => setTimeout(() => r("timeout"), 5000))]);
    print({ ordered: { result: om === "timeout" ? "timeout" : String(om) } });
  } catch (err) {
    print({ ordered: { error: describe(err) } });
  }
  print({ done: true });
  process.exit(0);
} else {
  throw new Error(`unknown mode ${mode}`);
}
await nc.drain();
