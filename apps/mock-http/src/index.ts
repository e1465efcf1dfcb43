/*
 * @dispatch-once/mock-http: what the mock servers share (HTTP bodies, how a scripted call's
 * number may be spelt). Private: each mock lists it
 * as a devDependency, so tsup bundles it into the mock's own dist and a published mock needs
 * nothing from here.
 */
export { jsonBody, type JsonBodyOptions } from "./json-body.js";
export { spellsNumber } from "./spelling.js";
