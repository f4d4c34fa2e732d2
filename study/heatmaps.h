// Attention maps as SVG, inlined in one HTML page: hover a cell for its
// query, key and weight. Every label goes through xml_text(), so any byte
// string (markup characters, UTF-8, raw bytes) gives well-formed XML.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::study {

/// Text safe inside XML character data and attribute values: & < > " '
/// as entities; control bytes, invalid UTF-8 and the non-characters XML
/// forbids (U+FFFE, U+FFFF) as visible escapes such as \x1b.
std::string xml_text(std::string_view text, size_t limit = 1 << 20);

/// One attention map: w is [rows, cols] row-major (queries down, keys
/// across). `split` > 0 marks where the answer starts (a line before that
/// row and column). `masked` (row-major, or empty) marks the cells the
/// model's masks hide: hatched, as the page draws them, not white as a
/// weight of 0. A space label shows as ␣. Includes a colour bar and position
/// indices.
std::string heatmap_svg(const std::vector<double>& w, int64_t rows, int64_t cols,
                        const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                        const std::string& title, int64_t split = -1, const std::vector<bool>& masked = {});

/// A ViT's [CLS] attention over its patches, laid over the image: the
/// pixels (image, side x side, values in [0, 1]) in grey, each patch tinted
/// red by its weight (scaled to this map's largest, printed in its tooltip),
/// with the patch grid drawn. `patch_weights` holds (side/patch)² weights in
/// reading order; `cls_weight` is what [CLS] keeps on itself.
std::string patch_overlay_svg(const std::vector<double>& image, int64_t side, int64_t patch,
                              const std::vector<double>& patch_weights, double cls_weight, const std::string& title);

/// A classifier's [CLS] row: each token in a box shaded by the weight [CLS]
/// gives it (scaled to the row's largest), with the weight in its tooltip.
std::string cls_row_svg(const std::vector<std::string>& tokens, const std::vector<double>& weights,
                        const std::string& title);

}  // namespace qkv::study
