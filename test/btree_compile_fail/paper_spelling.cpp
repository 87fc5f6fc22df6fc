// Must NOT compile: the paper's misprint of the default tree (see CMakeLists.txt here).
#include "tai/btree.hpp"

void use_the_papers_tree(tai::Quota& quota) {
  tai::BTree<43, 9, 9, 12> tree(nullptr, quota);
  (void)tree;
}
