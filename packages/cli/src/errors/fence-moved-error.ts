import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * `resolve` found the row at another fence than the one the operator decided on (RESOLVE-4): a
 * replay took it over, or someone else settled and a claim re-took it, since it was read. The
 * decision was about a claim that is no longer the row's, so nothing was written. Exit 4.
 */
export class FenceMovedError extends CliError {
  readonly key: string;
  readonly expectedFence: number;
  /** The row's fence when the refusal was made, when it could be read. */
  readonly fence: number | undefined;
  constructor(key: string, expectedFence: number, fence: number | undefined, now: string) {
    super(
      "fence_moved",
      EXIT_CODES.refused,
      `resolve refused for ${key}, nothing was written: you decided on fence ${expectedFence}, and the row has moved to ${fence === undefined ? "another fence" : `fence ${fence}`} (${now}) since; someone else acted on it. Inspect it again and decide on what it holds now`,
    );
    this.key = key;
    this.expectedFence = expectedFence;
    this.fence = fence;
  }
}
