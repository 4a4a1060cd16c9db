// A private PostgreSQL server for the browser tests of a cluster: the same
// recipe as the Go tests' db/dbtest (Debian's server binaries, a fresh
// data directory, a Unix socket only, trust authentication inside that
// private directory). As root, initdb and postgres run as the "postgres"
// system user, since they refuse to run as root.
import { spawn, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";

/** pgBinDir finds initdb and postgres ($GUESTLINK_TEST_PGBIN, else the newest /usr/lib/postgresql/N/bin). */
function pgBinDir() {
  const env = process.env.GUESTLINK_TEST_PGBIN;
  if (env) {
    if (!existsSync(join(env, "postgres"))) throw new Error(`$GUESTLINK_TEST_PGBIN=${env} holds no postgres binary`);
    return env;
  }
  const base = "/usr/lib/postgresql";
  const versions = existsSync(base) ? readdirSync(base).filter((v) => existsSync(join(base, v, "bin", "postgres"))) : [];
  if (versions.length === 0) {
    throw new Error('PostgreSQL server binaries not found (looked in $GUESTLINK_TEST_PGBIN and /usr/lib/postgresql/*/bin): install the Debian package "postgresql" (apt-get install postgresql)');
  }
  versions.sort((a, b) => Number(b) - Number(a));
  return join(base, versions[0], "bin");
}

/** serverUser returns the uid/gid to run the server as (root cannot). */
function serverUser() {
  if (process.getuid() !== 0) return {};
  const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("postgres:"));
  if (!line) throw new Error('running as root and there is no "postgres" user to run the server as');
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * startPostgres starts a private server and resolves to { url(name), createDatabase(name), stop() }.
 * The server listens only on a Unix socket in its own directory under /tmp.
 */
export async function startPostgres() {
  const bin = pgBinDir();
  const user = serverUser();
  const dir = mkdtempSync("/tmp/guestlink-pge2e-");
  if (user.uid !== undefined) chownSync(dir, user.uid, user.gid);
  const data = join(dir, "data");
  execFileSync(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"], {
    ...user, env: { ...process.env, LC_ALL: "C" }, stdio: ["ignore", "pipe", "pipe"],
  });
  const log = [];
  const proc = spawn(join(bin, "postgres"), ["-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "unix_socket_permissions=0777",
    "-c", "max_connections=300", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"], { ...user, stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout.on("data", (b) => log.push(b.toString()));
  proc.stderr.on("data", (b) => log.push(b.toString()));
  process.once("exit", () => proc.kill("SIGQUIT"));
  const exited = new Promise((r) => proc.on("exit", r));
  const psql = (sql, db = "postgres") => execFileSync(join(bin, "psql"), ["-h", dir, "-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], {
    stdio: ["ignore", "pipe", "pipe"],
  }).toString();
  const deadline = Date.now() + 90000;
  for (;;) {
    try {
      psql("SELECT 1");
      break;
    } catch (e) {
      if (proc.exitCode !== null) throw new Error(`postgres exited during start-up:\n${log.join("")}`);
      if (Date.now() > deadline) throw new Error(`postgres not accepting connections after 90 s: ${e.message}\n${log.join("")}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    dir,
    url: (name) => `postgres://postgres@/${name}?host=${encodeURIComponent(dir)}&sslmode=disable`,
    createDatabase(name) {
      psql(`CREATE DATABASE ${name}`);
      return this.url(name);
    },
    async stop() {
      proc.kill("SIGINT");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 30000);
      await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
