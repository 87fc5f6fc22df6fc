// tai/btree-inl.hpp - the member definitions of the tai::BTree<Bits...> template (included by
// tai/btree.hpp): only the forwarding to the run-time core, which gets the shape's arrays.
// Everything the steps do is in the core (src/btree/), compiled once for every shape.
//
// The predefined trees are instantiated once in src/btree/instantiations.cpp (extern template in
// btree.hpp); any other shape is instantiated from here in the user's translation unit.
#pragma once

namespace tai {

template <unsigned... Bits>
BTree<Bits...>::BTree(EngineFile* file, Quota& quota, const BTreeOptions& options)
    : TreeCore(kLevels, kShift.data(), kBits.data(), file, quota, options) {}

template <unsigned... Bits>
BTree<Bits...>::~BTree() = default;

}  // namespace tai
