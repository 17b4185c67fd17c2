// Query every GameSpy v1 server of a muster-bench farm with GameDig, all at once.
//
// usage: node gamedig-scan.mjs <gamedig package dir> <addresses file> [type] [options JSON]
// The addresses file has one query address (host:port) per line. Every query runs at the same
// time (Promise.all), 3 attempts each, exactly the given port (givenPortOnly); the options JSON
// (e.g. {"requestRules":true}) is added to every query. Prints one JSON object per server:
// {"address", "ok", "players", "rules"} (rules: how many the answer carries) and nothing else
// on stdout.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const [pkgDir, file, type = 'unrealtournament', extra = '{}'] = process.argv.slice(2)
const options = JSON.parse(extra)
if (!pkgDir || !file) {
  console.error('usage: node gamedig-scan.mjs <gamedig dir> <addresses file> [type]')
  process.exit(2)
}
const { GameDig } = await import(pathToFileURL(join(pkgDir, 'lib', 'index.js')).href)
const addresses = readFileSync(file, 'utf8').split('\n').map(l => l.trim()).filter(l => l.length > 0)

const results = await Promise.all(addresses.map(async address => {
  const i = address.lastIndexOf(':')
  const host = address.slice(0, i)
  const port = Number(address.slice(i + 1))
  try {
    const state = await GameDig.query({ ...options, type, host, port, givenPortOnly: true, maxRetries: 3 })
    return { address, ok: true, players: state.players.length, rules: Object.keys(state.raw?.rules ?? {}).length }
  } catch (e) {
    return { address, ok: false, players: 0, rules: 0 }
  }
}))
process.stdout.write(results.map(r => JSON.stringify(r)).join('\n') + '\n')
