import { readFile } from 'node:fs/promises'

// CPU time from Linux's /proc, for the bench scripts that measure a process or a thread.

/**
 * The user + system CPU seconds of a /proc `stat` line (a process's or a thread's): the fields after
 * the command's closing parenthesis (the command may hold one), utime and stime the 12th and 13th, in
 * clock ticks of 1/100 s.
 */
export function statCpuSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

/** The user + system CPU seconds process (or thread) `pid` has used so far. */
export async function cpuSeconds(pid: number | string): Promise<number> {
  return statCpuSeconds(await readFile(`/proc/${pid}/stat`, 'utf8'))
}
