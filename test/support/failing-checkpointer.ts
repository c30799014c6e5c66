// A checkpoint thread that fails at once: the SQLite store must notice and checkpoint inside its
// commits again (test/unit/store/sqlite.test.ts).
throw new Error('the checkpointer broke')
