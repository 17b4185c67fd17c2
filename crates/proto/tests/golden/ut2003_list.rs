//! Golden tests for ut2003_list.
