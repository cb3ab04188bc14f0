#!/usr/bin/env node
// Starts @20minutes/s3rver (4.x), an S3-compatible server that checks SigV4
// signatures, for the remote-shard tests. The package has no command-line
// entry point of its own that takes credentials, hence this file.
//
//   node serve.js --directory DIR --bucket NAME [--bucket NAME2 ...]
//                 [--address 127.0.0.1] [--port 0]
//                 [--access-key KEY --secret-key SECRET] [--verbose]
//
// Port 0 lets the kernel choose; the chosen port is printed on stdout as
// "listening PORT" once the server accepts connections, which is what the
// caller waits for (tests/integration/remote_servers.py). Requests without any
// signature are let through by s3rver as anonymous: a test that proves
// signatures are checked must send a wrong one, not none.
'use strict';

const fs = require('fs');

function usage(message) {
  process.stderr.write(`serve.js: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    address: '127.0.0.1',
    port: 0,
    directory: '',
    buckets: [],
    accessKey: '',
    secretKey: '',
    verbose: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--verbose') {
      opts.verbose = true;
      continue;
    }
    if (i + 1 >= argv.length) usage(`${flag} needs a value`);
    const value = argv[++i];
    switch (flag) {
      case '--address': opts.address = value; break;
      case '--port': opts.port = Number(value); break;
      case '--directory': opts.directory = value; break;
      case '--bucket': opts.buckets.push(value); break;
      case '--access-key': opts.accessKey = value; break;
      case '--secret-key': opts.secretKey = value; break;
      default: usage(`unknown option ${flag}`);
    }
  }
  if (!opts.directory) usage('--directory is required');
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
    usage(`--port must be 0..65535`);
  }
  if (Boolean(opts.accessKey) !== Boolean(opts.secretKey)) {
    usage('--access-key and --secret-key go together');
  }
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let S3rver;
  let AWSAccount;
  try {
    S3rver = require('@20minutes/s3rver');
    AWSAccount = require('@20minutes/s3rver/lib/models/account');
  } catch (err) {
    process.stderr.write(
      `serve.js: @20minutes/s3rver is not installed next to this file ` +
      `(run scripts/install-test-servers.sh): ${err.message}\n`);
    process.exit(1);
  }
  if (opts.accessKey) {
    // s3rver knows one built-in account with the key pair S3RVER/S3RVER;
    // give it the caller's pair instead so only that one signs validly.
    AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
    AWSAccount.DUMMY_ACCOUNT.createKeyPair(opts.accessKey, opts.secretKey);
  }
  fs.mkdirSync(opts.directory, { recursive: true });
  const server = new S3rver({
    address: opts.address,
    port: opts.port,
    directory: opts.directory,
    silent: !opts.verbose,
    // Path-style requests only (http://127.0.0.1:PORT/bucket/key), as the
    // tests' clients send them.
    vhostBuckets: false,
    configureBuckets: opts.buckets.map((name) => ({ name })),
  });
  const address = await server.run();
  process.stdout.write(`listening ${address.port}\n`);

  const stop = () => {
    server.close().finally(() => process.exit(0));
    // Keep-alive connections can hold close() open; do not wait for them.
    setTimeout(() => process.exit(0), 500).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  process.stderr.write(`serve.js: ${err.stack || err}\n`);
  process.exit(1);
});
