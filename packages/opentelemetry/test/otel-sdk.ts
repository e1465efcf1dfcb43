import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import { dispatchTelemetry, type TelemetryOptions } from "../src/index.js";

/** An OpenTelemetry SDK in memory, with the package's telemetry on it (and `options`): what the tests read spans and metrics from. */
export function sdk(options: Omit<TelemetryOptions, "tracer" | "meter"> = {}) {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const telemetry = dispatchTelemetry({ ...options, tracer: tracerProvider.getTracer("t"), meter: meterProvider.getMeter("t") });
  const exported = async (name: string) => {
    await reader.forceFlush();
    const all = exporter.getMetrics().at(-1)?.scopeMetrics.flatMap((s) => s.metrics) ?? [];
    return all.find((m) => m.descriptor.name === name);
  };
  /** Sum of a counter's points (a histogram's counts) whose attributes include `match`. */
  const metric = async (name: string, match: Record<string, unknown> = {}) => {
    let sum = 0;
    for (const p of (await exported(name))?.dataPoints ?? []) {
      if (Object.entries(match).every(([k, v]) => p.attributes[k] === v)) {
        sum += typeof p.value === "number" ? p.value : (p.value as { count: number }).count;
      }
    }
    return sum;
  };
  /** A metric's unit and the attribute names its points carry (OTEL-2: bounded ones only). */
  const metricShape = async (name: string) => {
    const found = await exported(name);
    return { unit: found?.descriptor.unit, attributeNames: [...new Set((found?.dataPoints ?? []).flatMap((p) => Object.keys(p.attributes)))] };
  };
  return { spans, telemetry, metric, metricShape, shutdown: () => Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]) };
}
