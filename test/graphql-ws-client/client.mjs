// A subscriber built on graphql-ws, the reference client of the
// graphql-transport-ws protocol. voucherd's end-to-end tests run it against
// the real binary (graph/realclient_test.go). It prints one JSON line per
// event on stdout, so the test can time and check them:
//
//   {"type":"next","payload":{"data":...}}   a result
//   {"type":"error","errors":[...]}          the operation failed
//   {"type":"complete"}                      the operation ended
//   {"type":"closed","code":4403,...}        the socket closed
//
// Settings come from the environment: URL (ws://host/graphql), TOKEN (sent
// as connection_init {"Authorization": "Bearer ..."}), QUERY, VARIABLES
// (JSON) and COUNT (exit after that many results; 0 for no limit).
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const { URL: url, TOKEN: token = '', QUERY: query } = process.env;
const variables = JSON.parse(process.env.VARIABLES || '{}');
const count = Number(process.env.COUNT || 0);

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: token ? { Authorization: `Bearer ${token}` } : {},
  lazy: false,
  retryAttempts: 0,
  onNonLazyError: () => {}, // reported by the closed listener
  on: {
    connected: () => emit({ type: 'connected' }),
    closed: (event) => {
      emit({ type: 'closed', code: event.code, reason: event.reason });
      process.exit(0);
    },
  },
});

let seen = 0;
client.subscribe(
  { query, variables },
  {
    next: (payload) => {
      emit({ type: 'next', payload });
      seen++;
      if (count > 0 && seen >= count) {
        client.dispose().then(() => process.exit(0));
      }
    },
    error: (err) => {
      if (Array.isArray(err)) {
        emit({ type: 'error', errors: err });
      } else if (err && typeof err.code === 'number') {
        emit({ type: 'closed', code: err.code, reason: err.reason });
      } else {
        emit({ type: 'error', errors: [{ message: String(err && err.message ? err.message : err) }] });
      }
      process.exit(0);
    },
    complete: () => {
      emit({ type: 'complete' });
      process.exit(0);
    },
  },
);
