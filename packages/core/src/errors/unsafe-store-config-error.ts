import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * The store is configured in a way that breaks the ledger's guarantee (an evicting Redis
 * maxmemory-policy forgets claims); adapters refuse to start on it (LEDGER-14).
 */
export class UnsafeStoreConfigError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "unsafe_store_config" as const;
  readonly setting: string;
  readonly value: string;
  readonly node: string;
  constructor(node: string, setting: string, value: string, message: string) {
    super("unsafe_store_config", `${node}: ${setting}=${value}: ${message}`);
    this.node = node;
    this.setting = setting;
    this.value = value;
  }
}
