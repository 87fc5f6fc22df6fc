// Must compile: the same use as paper_spelling.cpp with the shape the paper meant.
#include "tai/btree.hpp"

void use_the_papers_tree(tai::Quota& quota) {
  tai::BTree<34, 9, 9, 12> tree(nullptr, quota);
  (void)tree;
}
