// Conversations kept in the browser's IndexedDB (database "hasten",
// store "conversations", keyed by id), newest first.
const DB = "hasten";
const STORE = "conversations";

function db() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function run(mode, f) {
  return db().then((d) => new Promise((resolve, reject) => {
    const tx = d.transaction(STORE, mode);
    const req = f(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
  }));
}

/** Every conversation, newest first. */
export async function all() {
  const cs = await run("readonly", (s) => s.getAll());
  return cs.sort((a, b) => b.created - a.created);
}

/** Saves (or replaces) a conversation. */
export function put(conv) {
  return run("readwrite", (s) => s.put(conv));
}
