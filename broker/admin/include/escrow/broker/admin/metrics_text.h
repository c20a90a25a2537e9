// The writers of a metrics snapshot (escrow/broker/core/metrics.h): the Prometheus text exposition
// format of /metrics (metrics_text.cpp) and the JSON of /status (status_json.cpp). Pure functions,
// safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "escrow/broker/core/metrics.h"

namespace escrow::broker {

// The Prometheus text exposition format (version 0.0.4) of a snapshot.
std::string write_prometheus(const metrics_snapshot& s);
// /status: one JSON object.
std::string write_status_json(const metrics_snapshot& s);

// Building blocks, exposed for the unit tests.
// A label value with \ " and newline escaped as the format requires.
std::string escape_label_value(std::string_view v);
// A sample value: integers without a fraction, +Inf/-Inf/NaN spelled as Prometheus does.
std::string format_value(double v);
// Appends a histogram's _bucket (cumulative, ending with le="+Inf"), _sum and _count lines.
// `labels` is either empty or `name="value",...` without braces.
void append_histogram(std::string& out, std::string_view name, std::string_view labels, const histogram& h);

}  // namespace escrow::broker
