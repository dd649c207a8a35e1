// SPDX-License-Identifier: MIT
// Pays many addresses in one transaction, as an exchange's batched
// withdrawal does: a token through transferFrom (after approve), or the
// native currency. For tests only.
pragma solidity 0.8.28;

interface ITransferFrom {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

contract TestDisperse {
    function disperseToken(address token, address[] calldata to, uint256[] calldata values) external {
        require(to.length == values.length, "length mismatch");
        for (uint256 i = 0; i < to.length; i++) {
            require(ITransferFrom(token).transferFrom(msg.sender, to[i], values[i]), "transferFrom failed");
        }
    }

    function disperseEther(address payable[] calldata to, uint256[] calldata values) external payable {
        require(to.length == values.length, "length mismatch");
        for (uint256 i = 0; i < to.length; i++) {
            (bool ok, ) = to[i].call{value: values[i]}("");
            require(ok, "send failed");
        }
    }
}
