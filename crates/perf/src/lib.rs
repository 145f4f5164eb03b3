//! rucx benchmark library: test runners, results, table and JSON output.
