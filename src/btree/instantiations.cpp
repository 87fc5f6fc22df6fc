// The predefined trees, compiled once here (declared extern template in include/tai/btree.hpp):
// what a shape compiles is only the forwarding of tai/btree-inl.hpp, the rest is the run-time
// core (the other files of src/btree/).
#include "tai/btree.hpp"

namespace tai {

template class BTree<34, 9, 9, 12>;
template class BTree<64>;
template class BTree<2, TAI_BTREE_ONES_62>;

}  // namespace tai
