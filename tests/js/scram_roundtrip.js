// kafkajs with SASL/SCRAM against a broker's SASL_PLAINTEXT listener: create a topic, produce
// a few records, consume them back with a consumer group, and print a JSON summary on stdout
// for tests/integration/test_kafkajs_scram.py to check.
//
//   node scram_roundtrip.js HOST:PORT scram-sha-256|scram-sha-512 USER PASSWORD
//
// Exit status 0 when every step succeeded, 2 when one failed: the summary then carries
// "error" ({name, message}: kafkajs's error class, e.g. KafkaJSSASLAuthenticationError).
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, mechanism, username, password] = process.argv.slice(2);
if (!bootstrap || !mechanism || !username || password === undefined) {
  console.error('usage: node scram_roundtrip.js HOST:PORT MECHANISM USER PASSWORD');
  process.exit(1);
}
const suffix = `${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
const topic = `kafkajs-scram-${suffix}`;
const COUNT = 5;
const summary = { mechanism, username, topic, steps: [], sent: [], consumed: [] };

const kafka = new Kafka({
  clientId: 'eddy-kafkajs-scram',
  brokers: [bootstrap],
  sasl: { mechanism, username, password },
  logLevel: logLevel.NOTHING,
  connectionTimeout: 5000,
  authenticationTimeout: 5000,
  retry: { retries: 2, initialRetryTime: 100 },
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  summary.steps.push('admin.connect');
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
  summary.steps.push('createTopics');
  await admin.disconnect();

  const producer = kafka.producer();
  await producer.connect();
  summary.steps.push('producer.connect');
  const messages = [];
  for (let i = 0; i < COUNT; i++) messages.push({ key: `k${i}`, value: `${mechanism}-v${i}` });
  await producer.send({ topic, messages });
  summary.sent = messages.map((m) => m.value);
  summary.steps.push('send');
  await producer.disconnect();

  const consumer = kafka.consumer({
    groupId: `kafkajs-scram-${suffix}`, sessionTimeout: 10000, heartbeatInterval: 300,
    maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => { summary.consumed.push(message.value.toString()); },
  });
  const deadline = Date.now() + 30000;
  while (summary.consumed.length < COUNT) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the records');
    await sleep(50);
  }
  summary.steps.push('consume');
  await consumer.disconnect();
}

main().then(
  () => { console.log(JSON.stringify(summary)); process.exit(0); },
  (e) => {
    summary.error = { name: e && e.name, message: String(e && e.message) };
    console.log(JSON.stringify(summary));
    process.exit(2);
  },
);
