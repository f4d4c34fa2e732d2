// Files of a model folder someone else made (a Hugging Face GPT-2 folder, a
// tokenizer's): each file is named by the program, never by another file,
// and a link is followed only where such folders keep their files.
#pragma once

#include <string>

namespace qkv::io {

/// The path of `name` in `folder`, checked: a link is followed only to a
/// file inside the folder, or, for a Hugging Face hub cache's snapshot
/// (…/models--x/snapshots/<revision>/), into that model's own blobs folder
/// (…/models--x/blobs/), where the hub keeps the bytes its snapshot links
/// name. Anything else (a link out of the folder) throws a one-line error
/// naming the file and calling the folder a `folder_is` ("tokenizer folder").
/// The file need not exist.
std::string file_in_folder(const std::string& folder, const std::string& name, const char* folder_is);

/// Throws a one-line error naming `path` unless it is a folder (after links);
/// `expected` says what it should hold ("a GPT-2 folder holds config.json and model.safetensors").
void check_folder(const std::string& path, const char* expected);

}  // namespace qkv::io
