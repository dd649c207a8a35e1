// Compiles the contracts once with the pinned npm solc (see package.json /
// package-lock.json) and writes each contract's ABI and creation bytecode
// where Go embeds them:
//   src/*.sol (test contracts)  -> internal/settlement/evm/testchain/artifacts/<Name>.{abi.json,bin}
//   deposit/*.sol (the product's deposit factory and forwarder)
//                               -> internal/settlement/evm/deposit/artifacts/<Name>.{abi.json,bin}
// (.bin is hex, no 0x.)
// Run: cd contracts && npm ci && node build.mjs
// The outputs are committed; CI never recompiles (solc is only needed to
// change a contract). evmVersion paris avoids PUSH0 so the bytecode runs on
// any node the tests or a developer may point at.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import solc from 'solc';

const here = path.dirname(fileURLToPath(import.meta.url));
const outs = {
  src: path.join(here, '..', 'internal', 'settlement', 'evm', 'testchain', 'artifacts'),
  deposit: path.join(here, '..', 'internal', 'settlement', 'evm', 'deposit', 'artifacts'),
};
const sources = {};
for (const dir of Object.keys(outs)) {
  for (const f of fs.readdirSync(path.join(here, dir)).filter((f) => f.endsWith('.sol')).sort()) {
    // Test contracts keep their bare file names (their committed bytecode's
    // metadata names them so).
    sources[dir === 'src' ? f : `${dir}/${f}`] = { content: fs.readFileSync(path.join(here, dir, f), 'utf8') };
  }
}
const input = {
  language: 'Solidity',
  sources,
  settings: {
    evmVersion: 'paris',
    optimizer: { enabled: true, runs: 200 },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
};
const result = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (result.errors || []).filter((e) => e.severity === 'error');
for (const e of result.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
for (const [file, contracts] of Object.entries(result.contracts)) {
  const out = file.startsWith('deposit/') ? outs.deposit : outs.src;
  fs.mkdirSync(out, { recursive: true });
  for (const [name, c] of Object.entries(contracts)) {
    if (!c.evm.bytecode.object) continue; // an interface: nothing to deploy
    fs.writeFileSync(path.join(out, `${name}.abi.json`), JSON.stringify(c.abi, null, 2) + '\n');
    fs.writeFileSync(path.join(out, `${name}.bin`), c.evm.bytecode.object + '\n');
    console.log(`${file}:${name} -> ${path.relative(path.join(here, '..'), out)}/${name}.{abi.json,bin}`);
  }
}
console.log(`solc ${solc.version()}`);
