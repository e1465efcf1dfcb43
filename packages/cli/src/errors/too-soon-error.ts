import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * `resolve --not-performed` of an unkeyed_write row, or `resolve --failed` of any row, whose outcome
 * has been open for less than the grace on the ledger's clock (or for a time the ledger cannot
 * tell): a request its owner sent, or a paused owner still holding it, may land after the
 * downstream was checked, and a re-run would then perform the effect twice, or the row would say
 * failed of an effect that happened (RESOLVE-6). Nothing was written. Exit 4.
 */
export class TooSoonError extends CliError {
  readonly key: string;
  constructor(key: string, detail: string, flag: "--not-performed" | "--failed" = "--not-performed") {
    super(
      "too_soon",
      EXIT_CODES.refused,
      `resolve ${flag} refused for ${key}, nothing was written: ${detail}. Check the downstream again once --grace has passed, or pass --grace 0s if you know the owner is gone and nothing is in transit`,
    );
    this.key = key;
  }
}
