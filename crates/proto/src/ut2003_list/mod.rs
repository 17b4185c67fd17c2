//! ut2003_list: not yet implemented.
