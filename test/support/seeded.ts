/**
 * A fixed-seed generator of integers below `n`: the same sequence every run. The high bits of a linear
 * congruential generator: its low bits repeat with a short period (taken modulo a small `n`, two
 * draws in a row were correlated).
 */
export function seeded(seed: number): (n: number) => number {
  return (n) => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
    return Math.floor((seed / 2 ** 31) * n)
  }
}
