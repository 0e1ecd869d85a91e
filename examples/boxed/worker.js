// A boxed worker in plain Node.js (docs/boxed.md): no npm packages.
// Each line on stdin is one JSON record; each line on stdout is one.
"use strict";
const readline = require("readline");

const handlers = {
  add: (a, b) => a + b,
  greet: (name) => `hello, ${name}`,
  fail: (message) => {
    throw new RangeError(message);
  },
};

const send = (record) => process.stdout.write(JSON.stringify(record) + "\n");

send({ type: "hello", protocol: 1, handlers: Object.keys(handlers), concurrency: 16 });

const input = readline.createInterface({ input: process.stdin });
input.on("line", async (line) => {
  const record = JSON.parse(line);
  if (record.type === "request") {
    const handler = handlers[record.handler];
    try {
      if (!handler) throw Object.assign(new Error(record.handler), { name: "UnknownHandler" });
      const kwargs = Object.keys(record.kwargs).length ? [record.kwargs] : [];
      const value = await handler(...record.args, ...kwargs);
      send({ type: "reply", id: record.id, value: value === undefined ? null : value });
    } catch (error) {
      send({ type: "reply", id: record.id, error: { type: error.name, message: error.message } });
    }
  } else if (record.type === "heartbeat") {
    send({ type: "heartbeat" });
  } else if (record.type === "shutdown") {
    input.close(); // node exits once the handlers in flight have answered
  }
});
