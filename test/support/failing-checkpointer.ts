// A checkpoint thread that fails at once: the SQLite store must notice, checkpoint inside its commits
// again, and start the thread again (test/unit/store/sqlite.test.ts).
throw new Error('the checkpointer broke')
