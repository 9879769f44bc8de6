#!/usr/bin/env node
// dynalite that survives clients killed mid-request (tests/helpers/dynalite.py, survive_aborts=True).
//
// Usage: node dynalite_survive_aborts.js /path/to/dynalite/cli.js [dynalite's own options]
//
// dynalite's request handler does `req.on('error', function(err) { throw err })`: when a client dies
// (SIGKILL) while its request is still arriving, Node aborts the request with ECONNRESET, the listener
// throws, and the whole server exits. Such a request never reached dynalite's store (it had not ended),
// so here its error is dropped instead: the server's handler is wrapped, and after it has set up its
// listeners the throwing `error` listener of the request is replaced by one that ignores the abort.
'use strict'

const path = require('path')
const { createRequire } = require('module')

const cli = process.argv[2]
if (!cli) {
  console.error('usage: node dynalite_survive_aborts.js /path/to/dynalite/cli.js [options]')
  process.exit(2)
}
const fromDynalite = createRequire(path.resolve(cli))
const argv = fromDynalite('minimist')(process.argv.slice(3))
const dynalite = fromDynalite('./index.js')

const server = dynalite(argv)
const handlers = server.listeners('request')
server.removeAllListeners('request')
server.on('request', (req, res) => {
  for (const handler of handlers) handler.call(server, req, res)
  req.removeAllListeners('error')
  req.on('error', () => {}) // the client went away mid-request: nothing was done for it
})
server.listen(argv.port || 4567, () => {
  const address = server.address()
  console.log('Listening at http://%s:%s', address.address, address.port)
})
